#!/usr/bin/env python3
"""Round-trip time of one `search_memories` over each MCP transport, beside
the same search over `/v1`, all measured in one run on one data set.

Starts `evomem serve` (hashing embedder unless --embedder, rate limit off)
on a throwaway folder with one tenant, adds --memories memories for one
user, then times --calls searches each way, alternating the order of the
three ways per round so drift falls on all of them alike:

- `/v1`:  POST /v1/memories/search with httpx2 (the HTTP client the MCP SDK uses);
- `/mcp`: tools/call search_memories through the official Python SDK over
          streamable HTTP to the same service;
- stdio:  the same tool through the SDK to `evomem mcp --url` (a process
          that forwards each call to the service over HTTP), and to
          `evomem mcp --data-dir` on its own folder holding the same memories
          (the service's router called in process, no HTTP at all).

Prints p50/p99 in milliseconds and each way's ratio to `/v1`.

    pip install "mcp==2.3.0"
    python scripts/mcp-latency.py [--bin target/release/evomem] [--calls 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[1]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def run(args) -> None:
    data = Path(tempfile.mkdtemp(prefix="evomem-mcp-latency-"))
    key = subprocess.run(
        [args.bin, "serve", "keys", "add", "--tenant", "bench", "--data-dir", str(data)],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    env = dict(os.environ, EVOMEM_SERVE__RATE_LIMIT_PER_S="0")
    serve = subprocess.Popen(
        [args.bin, "serve", "--embedder", args.embedder, "--bind", "127.0.0.1:0", "--data-dir", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    try:
        line = serve.stdout.readline()
        url = "http://" + line.split("http://", 1)[1].split()[0]
        h = {"Authorization": f"Bearer {key}"}
        rng = random.Random(42)
        words = ["jazz", "tea", "hiking", "vinyl", "sci-fi", "sushi", "chess", "opera", "cycling", "poetry"]
        batches = [
            [
                {"text": f"likes {rng.choice(words)} and {rng.choice(words)} (note {i})"}
                for i in range(start, min(args.memories, start + 100))
            ]
            for start in range(0, args.memories, 100)
        ]
        async with httpx2.AsyncClient(headers=h, timeout=60) as http:
            for mems in batches:
                r = await http.post(url + "/v1/memories", json={"user_id": "u", "memories": mems})
                r.raise_for_status()
            query = {"user_id": "u", "query": "which music does the user like", "k": 10}

            async def v1_search():
                r = await http.post(url + "/v1/memories/search", json=query)
                r.raise_for_status()
                return r.json()

            mcp_http = Client(streamable_http_client(url + "/mcp", http_client=httpx2.AsyncClient(headers=h, timeout=60)))
            stdio = Client(
                StdioServerParameters(
                    command=args.bin, args=["mcp", "--url", url], env=dict(os.environ, EVOMEM_API_KEY=key)
                )
            )
            local = Client(
                StdioServerParameters(
                    command=args.bin,
                    args=["mcp", "--data-dir", str(data / "local"), "--embedder", args.embedder],
                    env=dict(os.environ, EVOMEM_SERVE__RATE_LIMIT_PER_S="0"),
                )
            )
            async with mcp_http as c_http, stdio as c_stdio, local as c_local:
                for mems in batches:
                    r = await c_local.call_tool("add_memories", {"user_id": "u", "memories": mems})
                    assert not r.is_error, r.content

                async def tool(c):
                    r = await c.call_tool("search_memories", query)
                    assert not r.is_error, r.content
                    return r.structured_content

                ways = {
                    "/v1": v1_search,
                    "/mcp (HTTP)": lambda: tool(c_http),
                    "stdio (evomem mcp --url)": lambda: tool(c_stdio),
                    "stdio (evomem mcp --data-dir)": lambda: tool(c_local),
                }

                def seen(answer):  # ids differ between the two folders
                    return [(h["memory"]["text"], round(h["score"], 5)) for h in answer["results"]]

                want = await v1_search()
                for name, f in ways.items():
                    assert seen(await f()) == seen(want), f"{name} answers differently"
                for _ in range(args.warmup):
                    for f in ways.values():
                        await f()
                times: dict[str, list[float]] = {n: [] for n in ways}
                order = list(ways)
                for i in range(args.calls):
                    rng.shuffle(order)
                    for n in order:
                        t = time.perf_counter()
                        await ways[n]()
                        times[n].append((time.perf_counter() - t) * 1000)
        base50, base99 = pct(times["/v1"], 50), pct(times["/v1"], 99)
        print(f"search_memories round trip, {args.calls} calls each, {args.memories} memories, embedder {args.embedder}")
        print(f"{'way':<31}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'p50/v1':>8}{'p99/v1':>8}")
        for n, xs in times.items():
            p50, p99 = pct(xs, 50), pct(xs, 99)
            print(f"{n:<31}{p50:>9.3f}{p99:>9.3f}{statistics.mean(xs):>9.3f}{p50 / base50:>8.2f}{p99 / base99:>8.2f}")
    finally:
        serve.terminate()
        serve.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "evomem"))
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--embedder", default="hashing")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
