#!/usr/bin/env python3
"""Several `evomem serve` instances on one PostgreSQL behind HAProxy, under
load, with one instance killed (SIGKILL) and another drained (SIGTERM).

Usage:
  scripts/scale-out.py --store postgres://USER@HOST:PORT/DB [--tenants 300]
      [--instances 3] [--seconds 90] [--clients 6] [--bin target/release/evomem]
      [--haproxy haproxy] [--ci]

Steps (docs/deploy.md explains the deployment this reproduces):
1. One keys file with `--tenants` tenants (`serve keys add`), shared by
   every instance (`--keys-file`); each instance its own data folder.
2. `--instances` instances on the same database (`--store`), the hashing
   embedder (this measures the deployment, not the model), and HAProxy in
   front: `balance hdr(Authorization)` with `hash-type consistent`, so a
   tenant's requests go to one instance; `/readyz` as health check;
   requests that failed to connect, got no answer or a 503 retried once on
   another instance (`retry-on`, `option redispatch`).
3. `--clients` threads add memories (each with a unique token in its text
   and an `Idempotency-Key`; a write is retried with the same key until it
   is acknowledged) and search, for `--seconds`. At a third of the time
   instance 1 is killed with SIGKILL and started again 3 s later; at two
   thirds instance 2 gets SIGTERM (drain) and is started again once it
   has exited.
4. Then every acknowledged token is looked up in its user's memories
   (through HAProxy): each must be present exactly once; every instance is
   stopped and `serve check` verifies every tenant's store.

Prints one JSON object: requests, acknowledged writes, missing and
duplicated writes, the requests that failed (a client saw an error before
its retry went through) in each window, peak RSS per instance (VmHWM,
read before the instance stops) and the check. Exit status 1 when a write
is missing or stored twice, or `serve check` fails. A retry answered 410
`applied_before` (its first attempt committed on an instance that died
before answering; the key is stored with the write) counts as
acknowledged, and how many there were is printed. `--ci` is a short run
(30 tenants, 3 instances, 24 s, 4 clients, at most 8 tenants open per
instance), which
`crates/evomem-cli/tests/scale_out.rs` runs in the test suite. Standard
library only.
"""

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, key, method, path, body=None, timeout=30, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None


def peak_rss(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Instance:
    def __init__(self, a, root, k, keys_file):
        self.a, self.k = a, k
        self.dir = os.path.join(root, f"i{k}")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.keys_file = keys_file
        self.proc = None
        self.peak = 0
        self.metrics = {}  # series -> largest value seen
        self.tenant_bytes = {}  # tenant -> last resident bytes seen

    def start(self):
        log = open(os.path.join(self.dir, "serve.log"), "a")
        env = dict(os.environ,
                   EVOMEM_SERVE__MAX_RESIDENT_BYTES=str(self.a.max_resident_bytes),
                   EVOMEM_SERVE__MAX_OPEN_TENANTS=str(self.a.max_open_tenants))
        self.proc = subprocess.Popen(
            [self.a.bin, "serve", "--data-dir", self.dir, "--embedder", "hashing",
             "--store", self.a.store, "--keys-file", self.keys_file,
             "--bind", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        line = self.proc.stdout.readline()
        if "listening" not in line:
            raise SystemExit(f"instance {self.k} did not start: {line!r} (see {self.dir}/serve.log)")
        self.started = time.time()
        return line.strip()

    def sample(self):
        if self.proc and self.proc.poll() is None:
            self.peak = max(self.peak, peak_rss(self.proc.pid) or 0)

    def scrape(self):
        """The largest value seen of the budget's series, and each open
        tenant's resident bytes, from /metrics."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return
        for line in text.splitlines():
            if line.startswith("#") or " " not in line:
                continue
            name, value = line.rsplit(" ", 1)
            try:
                v = float(value)
            except ValueError:
                continue
            if name.startswith("evomem_tenant_resident_bytes{"):
                self.tenant_bytes[name.split('"')[1]] = v
            elif name in ("evomem_resident_bytes", "evomem_tenants_open", "evomem_tenant_opens_total",
                          "evomem_tenant_closes_total", "evomem_tenant_over_budget_total",
                          "evomem_tenant_open_seconds_sum", "evomem_tenant_open_seconds_count"):
                # Counters restart with a restarted instance: keep the
                # largest of each life, summed.
                key = name if name in ("evomem_resident_bytes", "evomem_tenants_open") else f"{name}@{self.started}"
                self.metrics[key] = max(self.metrics.get(key, 0.0), v)

    def summary(self):
        def total(name):
            return sum(v for k, v in self.metrics.items() if k.split("@")[0] == name)
        opens = total("evomem_tenant_open_seconds_count")
        return {
            "peak_resident_mib": round(self.metrics.get("evomem_resident_bytes", 0) / 2**20, 1),
            "peak_open_tenants": int(self.metrics.get("evomem_tenants_open", 0)),
            "opens": int(total("evomem_tenant_opens_total")),
            "closes": int(total("evomem_tenant_closes_total")),
            "over_budget": int(total("evomem_tenant_over_budget_total")),
            "mean_open_ms": round(1000 * total("evomem_tenant_open_seconds_sum") / opens, 1) if opens else None,
        }

    def kill(self):
        self.sample()
        self.scrape()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def drain(self):
        self.sample()
        self.scrape()
        t = time.time()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)
        return time.time() - t

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.drain()


HAPROXY = """global
    maxconn 2000
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    retries 2
    option redispatch 1
    retry-on conn-failure empty-response 503
frontend evomem
    bind 127.0.0.1:{port}
    default_backend instances
backend instances
    balance hdr(Authorization)
    hash-type consistent
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 300ms fall 2 rise 2
{servers}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", required=True, help="a postgres:// URL of a database of its own")
    ap.add_argument("--tenants", type=int, default=300)
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "evomem"))
    ap.add_argument("--haproxy", default="haproxy")
    ap.add_argument("--prefix", default="t", help="tenant names: PREFIX0, PREFIX1, ... (schemas evomem_t_PREFIXn)")
    ap.add_argument("--ci", action="store_true",
                    help="short: 30 tenants, 3 instances, 24 s, 4 clients, at most 8 tenants open per instance")
    ap.add_argument("--max-resident-bytes", type=int, default=0,
                    help="each instance's serve.max_resident_bytes (0: no bound)")
    ap.add_argument("--max-open-tenants", type=int, default=0,
                    help="each instance's serve.max_open_tenants (0: no bound)")
    ap.add_argument("--no-faults", action="store_true",
                    help="kill and drain nothing (throughput with 1 or more instances)")
    a = ap.parse_args()
    if a.ci:
        a.tenants, a.instances, a.seconds, a.clients = 30, 3, 24, 4
        # Tenants close and reopen under load (about 10 per instance by the
        # hash, 8 open at most); and 3 x 8 open tenants
        # stay well under PostgreSQL's default 100 connections (one per
        # open tenant), which 3 x 30 would nearly fill.
        a.max_open_tenants = a.max_open_tenants or 8
    if a.instances < 3 and not a.no_faults:
        raise SystemExit("--instances: at least 3 (one is killed, one drained), or --no-faults")
    root = tempfile.mkdtemp(prefix="evomem-scale-")
    keys_dir = os.path.join(root, "keys")
    os.makedirs(keys_dir)
    keys_file = os.path.join(keys_dir, "keys.toml")
    keys = {}
    for t in range(a.tenants):
        name = f"{a.prefix}{t}"
        keys[name] = subprocess.run(
            [a.bin, "serve", "keys", "add", "--tenant", name, "--data-dir", keys_dir, "--keys-file", keys_file],
            check=True, capture_output=True, text=True).stdout.strip()
    insts = [Instance(a, root, k, keys_file) for k in range(a.instances)]
    starts = {}
    for i in insts:
        t = time.time()
        i.start()
        starts[i.k] = round(time.time() - t, 2)
    port = free_port()
    cfg = os.path.join(root, "haproxy.cfg")
    servers = "\n".join(f"    server i{i.k} 127.0.0.1:{i.port} check" for i in insts)
    open(cfg, "w").write(HAPROXY.format(port=port, servers=servers))
    hap = subprocess.Popen([a.haproxy, "-f", cfg, "-db"], stdout=subprocess.DEVNULL,
                           stderr=open(os.path.join(root, "haproxy.log"), "w"))
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            if call(base, keys[f"{a.prefix}0"], "GET", "/readyz", timeout=2)[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.2)
    try:
        out = load(a, base, keys, insts)
    finally:
        hap.terminate()
        for i in insts:
            i.stop()
    env = dict(os.environ, EVOMEM_SERVE__KEYS_FILE=keys_file)
    check = subprocess.run([a.bin, "serve", "check", "--data-dir", insts[0].dir, "--store", a.store,
                            "--keys-file", keys_file], capture_output=True, text=True, env=env)
    out["instance_start_s"] = starts
    out["peak_rss_mib"] = {f"i{i.k}": round(i.peak / 2**20, 1) for i in insts}
    out["budget"] = {"max_resident_bytes": a.max_resident_bytes, "max_open_tenants": a.max_open_tenants}
    out["per_instance"] = {f"i{i.k}": i.summary() for i in insts}
    seen = {}
    for i in insts:
        for t, v in i.tenant_bytes.items():
            seen[t] = max(seen.get(t, 0.0), v)
    out["tenants_resident_mib_seen"] = round(sum(seen.values()) / 2**20, 1)
    out["check_ok"] = check.returncode == 0
    out["check"] = (check.stdout.strip().splitlines() or [check.stderr.strip()])[-1]
    out["folder"] = root
    print(json.dumps(out, indent=1))
    # Exactly once: a keyed write's key is stored with its commit, so a
    # retry on another instance is answered 410 `applied_before`.
    ok = out["missing"] == 0 and out["duplicated"] == 0 and out["check_ok"]
    sys.exit(0 if ok else 1)


def load(a, base, keys, insts):
    stop = threading.Event()
    lock = threading.Lock()
    acked = []  # (tenant, user, token)
    applied_before = [0]  # retries answered 410 `applied_before`
    events = []  # (time, kind, ok)
    names = sorted(keys)

    # Tokens (and so Idempotency-Keys) unique to this run: a second run on
    # the same database must not find the first run's keys (stored a day)
    # or memories.
    run = os.urandom(4).hex()

    def client(c):
        r = random.Random(1000 + c)
        seq = 0
        while not stop.is_set():
            tenant = names[r.randrange(len(names))]
            user = f"u{r.randrange(4)}"
            if r.random() < 0.7:
                seq += 1
                token = f"w{run}c{c}x{seq}"
                body = {"user_id": user, "memories": [{"text": f"{token} likes item {r.randrange(500)}"}]}
                for _attempt in range(60):
                    t = time.time()
                    try:
                        st, _ = call(base, keys[tenant], "POST", "/v1/memories", body, 60,
                                     headers={"Idempotency-Key": token})
                    except OSError:
                        st = "conn"
                    # 410: the first attempt committed on an instance that
                    # died before answering (docs/deploy.md).
                    ok = st in (201, 410)
                    with lock:
                        events.append((t, "write", ok))
                        applied_before[0] += st == 410
                    if ok:
                        with lock:
                            acked.append((tenant, user, token))
                        break
                    time.sleep(0.3)
            else:
                t = time.time()
                try:
                    st, _ = call(base, keys[tenant], "POST", "/v1/memories/search",
                                 {"user_id": user, "query": "likes item", "k": 5}, 60)
                except OSError:
                    st = "conn"
                with lock:
                    events.append((t, "search", st == 200))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
    t0 = time.time()
    for t in threads:
        t.start()

    def sampler():
        while not stop.is_set():
            for i in insts:
                i.sample()
                i.scrape()
            time.sleep(0.5)

    threading.Thread(target=sampler, daemon=True).start()
    windows = {}
    drain_s = None
    if not a.no_faults:
        time.sleep(a.seconds / 3)
        k0 = time.time()
        insts[1].kill()
        time.sleep(3)
        insts[1].start()
        windows["kill"] = (k0, time.time() + 3)
        time.sleep(max(0.0, t0 + 2 * a.seconds / 3 - time.time()))
        d0 = time.time()
        drain_s = round(insts[2].drain(), 2)
        insts[2].start()
        windows["drain"] = (d0, time.time() + 3)
    time.sleep(max(0.0, t0 + a.seconds - time.time()))
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.time() - t0

    # Every acknowledged write, exactly once.
    by_user = {}
    for tenant, user, token in acked:
        by_user.setdefault((tenant, user), []).append(token)
    missing = duplicated = 0
    for (tenant, user), tokens in by_user.items():
        seen = {}
        cursor = None
        while True:
            q = f"/v1/users/{user}/memories?limit=1000" + (f"&cursor={cursor}" if cursor else "")
            st, v = call(base, keys[tenant], "GET", q, timeout=60)
            assert st == 200, (tenant, user, st, v)
            for m in v["memories"]:
                tok = m["text"].split(" ", 1)[0]
                seen[tok] = seen.get(tok, 0) + 1
            cursor = v.get("next_cursor")
            if not cursor:
                break
        for tok in tokens:
            n = seen.get(tok, 0)
            missing += n == 0
            duplicated += n > 1

    def failed(kind, lo, hi):
        return sum(1 for (t, k, ok) in events if k == kind and lo <= t < hi and not ok)

    out = {
        "tenants": a.tenants,
        "instances": a.instances,
        "clients": a.clients,
        "seconds": round(elapsed, 1),
        "requests": len(events),
        "requests_per_s": round(len(events) / elapsed, 1),
        "acknowledged_writes": len(acked),
        "missing": missing,
        "duplicated": duplicated,
        "applied_before": applied_before[0],
        "failed_writes": failed("write", 0, 1e12),
        "failed_searches": failed("search", 0, 1e12),
        "drain_s": drain_s,
    }
    for name, (lo, hi) in windows.items():
        out[f"failed_during_{name}"] = {"writes": failed("write", lo, hi), "searches": failed("search", lo, hi)}
    return out


if __name__ == "__main__":
    main()
