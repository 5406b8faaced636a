// A second MCP client, written by others: the official TypeScript SDK
// (@modelcontextprotocol/sdk) lists evomem's tools and calls add_memories
// and search_memories, then prints one JSON line of what it saw.
//
//   node client.mjs stdio EVOMEM_BIN DATA_DIR   (evomem mcp --data-dir, hashing embedder)
//   node client.mjs http URL KEY                (/mcp of a running evomem serve)
//
// Exits non-zero on any failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, a, b] = process.argv.slice(2);
let transport;
if (mode === "stdio") {
  transport = new StdioClientTransport({
    command: a,
    args: ["mcp", "--data-dir", b, "--embedder", "hashing"],
    stderr: "ignore",
  });
} else if (mode === "http") {
  transport = new StreamableHTTPClientTransport(new URL(a), {
    requestInit: { headers: { Authorization: `Bearer ${b}` } },
  });
} else {
  console.error("usage: client.mjs stdio BIN DATA_DIR | http URL KEY");
  process.exit(2);
}

const client = new Client({ name: "evomem-node-check", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
const added = await client.callTool({
  name: "add_memories",
  arguments: {
    user_id: "node_user",
    memories: [{ text: "loves slow jazz on vinyl" }, { text: "allergic to peanuts" }],
  },
});
if (added.isError) throw new Error(`add_memories failed: ${JSON.stringify(added.content)}`);
const found = await client.callTool({
  name: "search_memories",
  arguments: { user_id: "node_user", query: "slow jazz music", k: 1 },
});
if (found.isError) throw new Error(`search_memories failed: ${JSON.stringify(found.content)}`);
const bad = await client.callTool({
  name: "search_memories",
  arguments: { user_id: "node_user", query: "x", k: 0 },
});
console.log(
  JSON.stringify({
    server: client.getServerVersion(),
    tools: tools.map((t) => ({ name: t.name, annotations: t.annotations })),
    added: added.structuredContent.memories.length,
    top: found.structuredContent.results.map((r) => r.memory.text),
    bad_is_error: bad.isError === true,
    bad_message: bad.content[0].text,
  }),
);
await client.close();
