#!/usr/bin/env python3
"""Start time of `evomem serve` (SQLite, hashing embedder) by tenant count.

For each count (default 1, 100, 1000) a data folder is made once: that many
tenants, each with `--memories` memories (default 20) added through the API.
Then each binary given with `--bin LABEL=PATH` is started on it `--runs`
times (default 3); the script reports the median of the time from spawn to
the "listening" line and of the `ready in N ms` the service prints, and,
with `--first-request`, the time of one tenant's first request after the
start (a tenant opened on demand pays its open there).

With `--reopen N` it also measures the reopen of a tenant of N memories
(the last binary given, which must open tenants on demand): the service
runs with `serve.max_open_tenants = 1`, the big tenant is opened, closed by
a request to another tenant, and opened again; the open times come from
`/metrics` (`evomem_tenant_open_seconds`).

    scripts/start-time.py --bin before=/tmp/evomem-before \\
        --bin after=target/release/evomem --first-request --reopen 10000

Needs nothing but Python 3 and the binaries.
"""

import argparse
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_keys(folder, tenants):
    """Write the keys file directly (a key's SHA-256, as the service keeps
    it) and return {tenant: key}."""
    keys = {t: "evk_" + secrets.token_hex(16) for t in tenants}
    with open(os.path.join(folder, "keys.toml"), "w") as f:
        for t, k in keys.items():
            digest = hashlib.sha256(k.encode()).hexdigest()
            f.write(f'[[keys]]\ntenant = "{t}"\nlabel = ""\nsha256 = "{digest}"\n\n')
    os.chmod(os.path.join(folder, "keys.toml"), 0o600)
    return keys


class Server:
    """One `evomem serve` process on a free port."""

    def __init__(self, binary, folder, extra_env=None):
        self.port = free_port()
        env = dict(os.environ)
        env.update(
            {
                "EVOMEM_SERVE__EMBEDDER": "hashing",
                "EVOMEM_SERVE__RATE_LIMIT_PER_S": "0",
                "EVOMEM_SERVE__REQUEST_TIMEOUT_S": "600",
                "RUST_LOG": "warn",
            }
        )
        env.update(extra_env or {})
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [
                binary,
                "serve",
                "--data-dir",
                folder,
                "--bind",
                f"127.0.0.1:{self.port}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        self.listening_s = None
        self.ready_ms = None
        for line in self.proc.stdout:
            if "listening on" in line:
                self.listening_s = time.monotonic() - self.t0
                m = re.search(r"ready in (\d+) ms", line)
                self.ready_ms = int(m.group(1)) if m else None
                break
        if self.listening_s is None:
            raise RuntimeError(f"{binary}: no listening line (exit {self.proc.wait()})")
        # Keep reading stdout so that the process never blocks on it.
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def call(self, method, path, key=None, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method
        )
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=600) as r:
            text = r.read().decode()
        try:
            return json.loads(text)
        except ValueError:
            return text

    def metric(self, name):
        text = self.call("GET", "/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def fill(binary, folder, keys, memories, batch=1000):
    """Add `memories` memories to every tenant of `keys` through the API."""
    s = Server(binary, folder)
    try:

        def one(item):
            tenant, key = item
            left = memories
            while left > 0:
                n = min(batch, left)
                body = {
                    "user_id": "u",
                    "memories": [
                        {"text": f"{tenant} memory {left - i}: likes item {(left - i) % 97}"}
                        for i in range(n)
                    ],
                }
                s.call("POST", "/v1/memories", key, body)
                left -= n

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, keys.items()))
    finally:
        s.stop()


def start_times(binary, folder, runs, first_key):
    listening, ready, first = [], [], []
    for _ in range(runs):
        s = Server(binary, folder)
        listening.append(s.listening_s * 1000)
        ready.append(s.ready_ms)
        if first_key:
            t = time.monotonic()
            s.call(
                "POST",
                "/v1/memories/search",
                first_key,
                {"user_id": "u", "query": "likes item 3", "k": 5},
            )
            first.append((time.monotonic() - t) * 1000)
        s.stop()
    med = lambda xs: statistics.median(xs) if xs else None
    return med(listening), med(ready), med(first)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", action="append", required=True, help="LABEL=PATH")
    ap.add_argument("--counts", default="1,100,1000")
    ap.add_argument("--memories", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--first-request", action="store_true")
    ap.add_argument("--reopen", type=int, default=0, help="memories of the reopened tenant")
    ap.add_argument("--work", default=None, help="folder for the data (default: a temp dir)")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin]
    work = a.work or tempfile.mkdtemp(prefix="evomem-start-")
    fill_bin = bins[-1][1]
    rows = []
    for n in [int(c) for c in a.counts.split(",")]:
        folder = os.path.join(work, f"tenants-{n}")
        os.makedirs(folder, exist_ok=True)
        keys = write_keys(folder, [f"t{i}" for i in range(n)])
        t = time.monotonic()
        fill(fill_bin, folder, keys, a.memories)
        print(f"# {n} tenants x {a.memories} memories made in {time.monotonic() - t:.1f} s", flush=True)
        first_key = keys["t0"] if a.first_request else None
        for label, binary in bins:
            listening, ready, first = start_times(binary, folder, a.runs, first_key)
            rows.append((n, label, listening, ready, first))
            print(f"# {n} tenants, {label}: listening {listening:.0f} ms", flush=True)
    print()
    print(f"| tenants (x {a.memories} memories) | binary | to `listening` (ms) | `ready in` (ms) | first request (ms) |")
    print("|---:|---|---:|---:|---:|")
    for n, label, listening, ready, first in rows:
        f = "" if first is None else f"{first:.0f}"
        print(f"| {n} | {label} | {listening:.0f} | {ready} | {f} |")
    if a.reopen:
        folder = os.path.join(work, f"reopen-{a.reopen}")
        os.makedirs(folder, exist_ok=True)
        keys = write_keys(folder, ["big", "small"])
        fill(fill_bin, folder, {"big": keys["big"]}, a.reopen)
        fill(fill_bin, folder, {"small": keys["small"]}, 1)
        s = Server(fill_bin, folder, {"EVOMEM_SERVE__MAX_OPEN_TENANTS": "1"})
        q = {"user_id": "u", "query": "likes item 3", "k": 5}
        opens = []
        try:
            for _ in range(a.runs):
                before = s.metric("evomem_tenant_open_seconds_sum")
                t = time.monotonic()
                s.call("POST", "/v1/memories/search", keys["big"], q)
                took = (time.monotonic() - t) * 1000
                opened = (s.metric("evomem_tenant_open_seconds_sum") - before) * 1000
                opens.append((opened, took))
                s.call("POST", "/v1/memories/search", keys["small"], q)
            closes = s.metric("evomem_tenant_closes_total")
        finally:
            s.stop()
        print()
        print(f"reopen of a tenant of {a.reopen} memories (hashing embedder, {bins[-1][0]}), "
              f"{a.runs} times, {closes:.0f} closes:")
        for opened, took in opens:
            print(f"  open {opened:.0f} ms; its first search answered in {took:.0f} ms")


if __name__ == "__main__":
    main()
