"""evomem over the Model Context Protocol, driven by the official client SDKs:
Python's `mcp` over stdio (`evomem mcp --data-dir`) and over streamable HTTP
(`/mcp` of a real `evomem serve`), and the TypeScript SDK in Node
(crates/evomem-mcp/tests/node/client.mjs) over both.

Every tool is called; results are checked against `/v1` for the same
requests; a wrong key, a bad argument and a failing batch are checked, and
two users are kept apart. Under CI, a missing `mcp` package or Node fails."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from conftest import REPO

TOOLS_JSON = REPO / "crates" / "evomem-mcp" / "tools.json"
NODE_DIR = REPO / "crates" / "evomem-mcp" / "tests" / "node"
EXPECTED_TOOLS = {
    "add_memories",
    "search_memories",
    "list_memories",
    "get_memory",
    "update_memory",
    "delete_memory",
    "memory_history",
    "record_events",
    "recommend",
    "feedback",
    "delete_user",
}


def v1(url: str, key: str, method: str, path: str, body=None):
    """One /v1 request: (status, JSON body)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def call(client, name, args):
    r = await client.call_tool(name, args)
    return r


async def ok(client, name, args):
    r = await client.call_tool(name, args)
    assert not r.is_error, f"{name} failed: {r.content}"
    return r.structured_content


async def exercise_every_tool(client) -> dict:
    """Call every tool on two users; return what a /v1 comparison needs."""
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == EXPECTED_TOOLS
    documented = {t["name"]: t for t in json.loads(TOOLS_JSON.read_text())}
    for name, t in tools.items():
        assert t.input_schema == documented[name]["inputSchema"], name
        assert t.description == documented[name]["description"], name
    assert tools["delete_user"].annotations.destructive_hint is True
    assert tools["search_memories"].annotations.read_only_hint is True

    added = await ok(
        client,
        "add_memories",
        {
            "user_id": "alice",
            "memories": [
                {"text": "prefers slow jazz and vinyl records", "metadata": {"kind": "taste"}},
                {"text": "is allergic to peanuts", "metadata": {"kind": "health"}},
            ],
        },
    )
    assert [m["user_id"] for m in added["memories"]] == ["alice", "alice"]
    await ok(client, "add_memories", {"user_id": "bob", "memories": [{"text": "plays heavy metal drums"}]})

    # Two users kept apart: Alice's search never returns Bob's memory.
    found = await ok(client, "search_memories", {"user_id": "alice", "query": "heavy metal drums", "k": 10})
    assert {h["memory"]["user_id"] for h in found["results"]} == {"alice"}
    bobs = await ok(client, "list_memories", {"user_id": "bob"})
    assert [m["text"] for m in bobs["memories"]] == ["plays heavy metal drums"]

    mid = added["memories"][0]["id"]
    got = await ok(client, "get_memory", {"id": mid})
    assert got["text"] == "prefers slow jazz and vinyl records"
    upd = await ok(client, "update_memory", {"id": mid, "text": "prefers bebop jazz", "idempotency_key": "k-up-1"})
    assert upd["text"] == "prefers bebop jazz"
    hist = await ok(client, "memory_history", {"id": mid})
    assert len(hist["history"]) >= 2

    ev = await ok(
        client,
        "record_events",
        {
            "user_id": "alice",
            "events": [
                {"item": {"id": "i1", "title": "Kind of Blue", "categories": ["Jazz"]}, "rating": 5},
                {"item": {"id": "i2", "title": "Master of Puppets", "categories": ["Metal"]}, "rating": 1},
            ],
        },
    )
    assert ev["observed"] == 2
    rec = await ok(
        client,
        "recommend",
        {
            "user_id": "alice",
            "candidates": [
                {"id": "i3", "title": "A Love Supreme", "categories": ["Jazz"]},
                {"id": "i4", "title": "Reign in Blood", "categories": ["Metal"]},
            ],
        },
    )
    assert len(rec["ranking"]) == 2
    fb = await ok(client, "feedback", {"decision_id": rec["decision_id"], "reward": 1.0, "item_id": "i3"})
    assert fb["decision_id"] == rec["decision_id"]

    # A bad argument: a tool result with isError, naming the field.
    bad = await call(client, "search_memories", {"user_id": "alice", "query": "x", "k": 0})
    assert bad.is_error and "`k`" in bad.content[0].text, bad.content
    wrong_type = await call(client, "get_memory", {"id": 5})
    assert wrong_type.is_error and "`id`" in wrong_type.content[0].text
    unknown = await call(client, "get_memory", {"id": "m_nope"})
    assert unknown.is_error and "m_nope" in unknown.content[0].text
    # Nothing is stored by a call that fails: a batch with one bad entry.
    before = await ok(client, "list_memories", {"user_id": "alice"})
    failed = await call(
        client,
        "add_memories",
        {"user_id": "alice", "memories": [{"text": "fine"}, {"text": "", "metadata": {}}]},
    )
    assert failed.is_error, failed.content
    after = await ok(client, "list_memories", {"user_id": "alice"})
    assert after == before
    # An unknown tool is a protocol error, not a tool result.
    with pytest.raises(MCPError):
        await client.call_tool("no_such_tool", {})

    # The user's memories as a resource.
    templates = await client.list_resource_templates()
    assert [t.uri_template for t in templates.resource_templates] == ["evomem://users/{user_id}/memories"]
    res = await client.read_resource("evomem://users/alice/memories", cache_mode="bypass")
    assert json.loads(res.contents[0].text) == after

    gone = await ok(client, "delete_memory", {"id": added["memories"][1]["id"]})
    assert gone["deleted"] is True
    erased = await ok(client, "delete_user", {"user_id": "bob"})
    assert erased["user_id"] == "bob"
    assert (await ok(client, "list_memories", {"user_id": "bob"}))["memories"] == []
    return {"after_delete": await ok(client, "list_memories", {"user_id": "alice"})}


def stdio_params(evomem_bin, data: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(evomem_bin),
        args=["mcp", "--data-dir", str(data), "--embedder", "hashing"],
    )


def test_stdio_against_a_data_folder(evomem_bin, tmp_path):
    data = tmp_path / "mcp-data"

    async def run():
        async with Client(stdio_params(evomem_bin, data)) as client:
            seen = await exercise_every_tool(client)
        # A second process on the same folder finds what the first stored.
        async with Client(stdio_params(evomem_bin, data)) as client:
            again = await ok(client, "list_memories", {"user_id": "alice"})
        assert again == seen["after_delete"]

    asyncio.run(run())


def http_client(url: str, key: str):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return Client(streamable_http_client(url + "/mcp", http_client=http))


def test_http_against_serve_matches_v1(serve):
    url, key = serve

    async def run():
        async with http_client(url, key) as client:
            await exercise_every_tool(client)
            # The same requests through /v1 give the same answers.
            listed = await ok(client, "list_memories", {"user_id": "alice"})
            st, direct = v1(url, key, "GET", "/v1/users/alice/memories")
            assert st == 200 and direct == listed
            q = {"user_id": "alice", "query": "jazz records", "k": 3}
            st, direct = v1(url, key, "POST", "/v1/memories/search", q)
            assert st == 200 and direct == await ok(client, "search_memories", q)
            mid = listed["memories"][0]["id"]
            st, direct = v1(url, key, "GET", f"/v1/memories/{mid}")
            assert st == 200 and direct == await ok(client, "get_memory", {"id": mid})
            st, direct = v1(url, key, "GET", f"/v1/memories/{mid}/history")
            assert st == 200 and direct == await ok(client, "memory_history", {"id": mid})
            # And a /v1 error is the tool's error, with the same message.
            st, direct = v1(url, key, "POST", "/v1/memories/search", {"user_id": "alice", "query": "x", "k": 0})
            bad = await call(client, "search_memories", {"user_id": "alice", "query": "x", "k": 0})
            assert st == 422 and bad.structured_content == direct

    asyncio.run(run())


def test_http_refuses_a_wrong_key(serve):
    url, _ = serve

    async def run():
        async with http_client(url, "evk_" + "0" * 32) as client:
            await client.list_tools()

    # The SDK reports the refusal as an error response (it keeps the status
    # to itself); the status is checked at the door below.
    with pytest.raises(Exception) as e:
        asyncio.run(run())
    assert "MCPError" in repr(e.value) or "401" in repr(e.value), repr(e.value)
    # And the door answers 401 itself, before any MCP message is read.
    req = urllib.request.Request(url + "/mcp", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 401


def node_client(*args) -> dict:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        msg = "Node or the TypeScript SDK is missing: run `npm ci --prefix crates/evomem-mcp/tests/node`"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    out = subprocess.run(
        [node, str(NODE_DIR / "client.mjs"), *args], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_node(seen: dict):
    assert {t["name"] for t in seen["tools"]} == EXPECTED_TOOLS
    assert seen["server"]["name"] == "evomem"
    assert seen["added"] == 2
    assert seen["top"] == ["loves slow jazz on vinyl"]
    assert seen["bad_is_error"] and "`k`" in seen["bad_message"]


def test_typescript_sdk_over_stdio(evomem_bin, tmp_path):
    check_node(node_client("stdio", str(evomem_bin), str(tmp_path / "node-data")))


def test_typescript_sdk_over_http(serve):
    url, key = serve
    check_node(node_client("http", url + "/mcp", key))


def test_stdio_forwarding_to_a_service(evomem_bin, serve):
    """`evomem mcp --url` with EVOMEM_API_KEY: the tools reach the service's
    tenant (seen through /v1), and a wrong key is each tool's error."""
    url, key = serve

    def params(k):
        return StdioServerParameters(
            command=str(evomem_bin), args=["mcp", "--url", url], env=dict(os.environ, EVOMEM_API_KEY=k)
        )

    async def run():
        async with Client(params(key)) as client:
            added = await ok(client, "add_memories", {"user_id": "carol", "memories": [{"text": "reads Borges"}]})
            st, direct = v1(url, key, "GET", "/v1/users/carol/memories")
            assert st == 200 and direct["memories"] == added["memories"]
            hits = await ok(client, "search_memories", {"user_id": "carol", "query": "Borges"})
            assert hits["results"][0]["memory"]["text"] == "reads Borges"
        async with Client(params("evk_" + "0" * 32)) as client:
            refused = await call(client, "list_memories", {"user_id": "carol"})
            assert refused.is_error and refused.content[0].text.startswith("401"), refused.content

    asyncio.run(run())
