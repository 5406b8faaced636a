"""A scripted agent that uses evomem only through MCP tools.

It starts `evomem mcp` on a throwaway data folder (stdio), stores what the
user says about their tastes, recalls it, records what they listened to,
asks for a recommendation among new albums, and sends feedback on it. Each
step prints the tool call and the part of the answer an agent would read.
No LLM is involved: the "agent" is the script, so the transcript is the
same on every run but for ids (the hashing embedder, seeded policies).

    pip install "mcp==2.3.0"
    python examples/mcp_agent.py [EVOMEM_BIN]

EVOMEM_BIN defaults to target/debug/evomem, then target/release/evomem,
then `evomem` on PATH.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path

from mcp import Client, StdioServerParameters

REPO = Path(__file__).resolve().parents[1]


def find_bin() -> str:
    if len(sys.argv) > 1:
        return sys.argv[1]
    for p in [REPO / "target" / "debug" / "evomem", REPO / "target" / "release" / "evomem"]:
        if p.is_file():
            return str(p)
    found = shutil.which("evomem")
    if not found:
        sys.exit("no evomem binary: cargo build -p evomem, or pass its path")
    return found


async def tool(client: Client, name: str, args: dict) -> dict:
    print(f"\n> {name} {json.dumps(args)}")
    r = await client.call_tool(name, args)
    if r.is_error:
        print(f"  error: {r.content[0].text}")
        return {}
    return r.structured_content


async def main() -> None:
    data = tempfile.mkdtemp(prefix="evomem-mcp-agent-")
    params = StdioServerParameters(
        command=find_bin(), args=["mcp", "--data-dir", data, "--embedder", "hashing"]
    )
    async with Client(params) as client:
        tools = await client.list_tools()
        print("tools:", ", ".join(t.name for t in tools.tools))

        user = "maya"
        said = [
            "Maya loves modal jazz, especially Miles Davis",
            "Maya finds heavy metal too loud",
            "Maya listens to records on vinyl in the evening",
        ]
        r = await tool(client, "add_memories", {"user_id": user, "memories": [{"text": t} for t in said]})
        print(f"  stored {len(r['memories'])} memories")

        r = await tool(client, "search_memories", {"user_id": user, "query": "which jazz does Maya like", "k": 2})
        for h in r["results"]:
            print(f"  {h['score']:.3f}  {h['memory']['text']}")

        albums = {
            "kob": ("Kind of Blue", ["Jazz", "Modal"]),
            "mop": ("Master of Puppets", ["Metal"]),
            "als": ("A Love Supreme", ["Jazz", "Modal"]),
            "rib": ("Reign in Blood", ["Metal"]),
            "mfc": ("Maiden Voyage", ["Jazz", "Modal"]),
        }

        def item(i: str) -> dict:
            return {"id": i, "title": albums[i][0], "categories": albums[i][1]}

        r = await tool(
            client,
            "record_events",
            {"user_id": user, "events": [{"item": item("kob"), "rating": 5}, {"item": item("mop"), "rating": 1}]},
        )
        print(f"  observed {r['observed']} events, {r['ops']} memory ops")

        r = await tool(
            client,
            "recommend",
            {"user_id": user, "candidates": [item("als"), item("rib"), item("mfc")], "k": 3},
        )
        decision = r["decision_id"]
        for rank in r["ranking"]:
            print(f"  {rank['score']:+.3f}  {albums[rank['item_id']][0]}")
        print(f"  decision {decision} by {r['policy']}, {len(r['evidence'])} pieces of evidence")

        chosen = r["ranking"][0]["item_id"]
        r = await tool(client, "feedback", {"decision_id": decision, "reward": 1.0, "item_id": chosen})
        print(f"  feedback counted ({r['ops']} memory ops)")

        r = await tool(client, "search_memories", {"user_id": user, "query": "x", "k": 0})
        r = await tool(client, "list_memories", {"user_id": user})
        print(f"  {len(r['memories'])} memories held for {user}")


if __name__ == "__main__":
    asyncio.run(main())
