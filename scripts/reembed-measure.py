#!/usr/bin/env python3
"""Measure `evomem serve reembed` on a folder of N memories (50,000 by
default) while the service serves: time, what readers and writers saw
during the job, and recall@10 before and after against exact f32 search.

Usage: scripts/reembed-measure.py [--memories 50000] [--bin target/release/evomem]

Steps: a fresh data folder on f32 MiniLM (`--embedder minilm`), N memories
over two users (so each user's namespace is past the HNSW threshold of
20,000), each with metadata {"g": 1}; 200 query texts from the same
generator with another seed. Truth: the exact f32 top-10 (a search with the
filter {"g": 1} scans every memory of the user exactly). Before: the f32
index's top-10 without a filter. Then `serve reembed --embedder minilm-int8`
runs through the service while two readers search and one writer adds a
memory every 250 ms; after: the int8 index's top-10, once its graphs are in.
Only the standard library; prints one JSON object and a table.
"""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

WORDS = {
    "who": ["Alice", "Bob", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jun"],
    "verb": ["loves", "avoids", "collects", "reviews", "recommends", "dislikes", "rewatches",
             "is curious about", "buys", "talks about"],
    "adj": ["quiet", "loud", "vintage", "modern", "spicy", "sweet", "dark", "bright", "slow",
            "fast", "funny", "sad", "epic", "minimal", "handmade", "rare", "cheap", "luxury"],
    "thing": ["jazz fusion records", "science fiction novels", "hiking boots", "green tea",
              "board games", "horror films", "street food", "mechanical keyboards",
              "opera recordings", "running shoes", "indie video games", "oil paintings",
              "mystery podcasts", "vegan recipes", "road bikes", "film cameras",
              "classical guitar", "anime series", "craft beer", "documentaries",
              "houseplants", "chess openings", "folk music", "comic books"],
    "when": ["on weekends", "after work", "in winter", "every morning", "with friends",
             "when travelling", "late at night", "on holidays", "since childhood", "lately"],
    "why": ["because they relax", "for the stories", "to learn", "for the sound",
            "as a gift idea", "to unwind", "for the challenge", "with nostalgia"],
}


def text(rng: random.Random) -> str:
    w = {k: rng.choice(v) for k, v in WORDS.items()}
    extra = rng.choice(WORDS["thing"])
    return (f"{w['who']} {w['verb']} {w['adj']} {w['thing']} {w['when']} {w['why']}, "
            f"and sometimes {rng.choice(WORDS['adj'])} {extra} (note {rng.randrange(10**6)})")


def call(base, key, method, path, body=None, timeout=120, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def top10(base, key, user, q, exact):
    body = {"user_id": user, "query": q, "k": 10}
    if exact:
        body["filter"] = {"g": 1}
    st, v = call(base, key, "POST", "/v1/memories/search", body)
    assert st == 200, (st, v)
    return [h["memory"]["id"] for h in v["results"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memories", type=int, default=50_000)
    ap.add_argument("--bin", default="target/release/evomem")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--store", default=None,
                    help="a postgres:// URL (a database of its own: tenant `big` is created in it); default SQLite")
    a = ap.parse_args()
    a.store_args = ["--store", a.store] if a.store else []
    data = tempfile.mkdtemp(prefix="evomem-reembed-")
    key = subprocess.run([a.bin, "serve", "keys", "add", "--tenant", "big", "--data-dir", data],
                         check=True, capture_output=True, text=True).stdout.strip()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    srv = subprocess.Popen([a.bin, "serve", "--data-dir", data, "--embedder", "minilm", *a.store_args,
                            "--bind", f"127.0.0.1:{port}"],
                           stdout=subprocess.PIPE, stderr=open(os.path.join(data, "serve.log"), "w"),
                           text=True)
    srv.stdout.readline()
    try:
        run(a, data, key, base, srv)
    finally:
        srv.terminate()


def run(a, data, key, base, srv):
    users = ["u0", "u1"]
    rng = random.Random(7)
    t0 = time.time()
    per = a.memories // len(users)
    for u in users:
        for start in range(0, per, 100):
            mems = [{"text": text(rng), "metadata": {"g": 1}} for _ in range(min(100, per - start))]
            # Keyed, so that a retry after a timeout never writes twice.
            for _attempt in range(20):
                st, v = call(base, key, "POST", "/v1/memories",
                             {"user_id": u, "memories": mems}, 600,
                             headers={"Idempotency-Key": f"{u}-{start}"})
                if st != 503:
                    break
                time.sleep(2)
            assert st == 201, (st, v)
    ingest_s = time.time() - t0
    qrng = random.Random(11)
    queries = [(users[i % 2], text(qrng)) for i in range(a.queries)]

    def recall(exact_after):
        hits = total = 0
        for u, q in queries:
            truth = truth_of[(u, q)]
            got = top10(base, key, u, q, exact_after)
            hits += len(set(truth) & set(got))
            total += len(truth)
        return hits / total

    truth_of = {(u, q): top10(base, key, u, q, True) for u, q in queries}
    recall_before = recall(False)

    stop = threading.Event()
    reads, writes = [], []

    def reader(i):
        r = random.Random(100 + i)
        while not stop.is_set():
            u, q = queries[r.randrange(len(queries))]
            t = time.time()
            try:
                st, _ = call(base, key, "POST", "/v1/memories/search",
                             {"user_id": u, "query": q, "k": 10}, 60)
            except Exception as e:  # noqa: BLE001 - counted, not raised
                st = str(e)
            reads.append((t, time.time() - t, st))

    def writer():
        r = random.Random(200)
        while not stop.is_set():
            t = time.time()
            try:
                st, _ = call(base, key, "POST", "/v1/memories",
                             {"user_id": "w", "memories": [{"text": text(r)}]}, 120)
            except Exception as e:  # noqa: BLE001
                st = str(e)
            writes.append((t, time.time() - t, st))
            time.sleep(0.25)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    time.sleep(5)
    job_start = time.time()
    job = subprocess.run([a.bin, "serve", "reembed", "--data-dir", data, "--embedder", "minilm-int8", *a.store_args],
                         capture_output=True, text=True)
    job_end = time.time()
    time.sleep(5)
    stop.set()
    for t in threads:
        t.join()
    assert job.returncode == 0, job.stderr
    status = json.load(open(os.path.join(data, "reembed", "status.json")))
    # The int8 graphs are built after the swap, at bulk priority.
    exact_int8 = recall(True)
    deadline = time.time() + 300
    log = os.path.join(data, "serve.log")
    while time.time() < deadline and "re-embed put in" not in open(log).read():
        time.sleep(1)
    recall_after = recall(False)
    hwm = [l for l in open(f"/proc/{srv.pid}/status") if l.startswith("VmHWM")]
    srv.terminate()
    srv.wait()
    check = subprocess.run([a.bin, "serve", "check", "--data-dir", data, *a.store_args], capture_output=True, text=True)

    def phase(rows, lo, hi):
        xs = [d for (t, d, st) in rows if lo <= t < hi]
        bad = [st for (t, d, st) in rows if lo <= t < hi and st not in (200, 201)]
        return {"n": len(xs), "errors": len(bad), "p50_ms": round(pct(xs, 0.5) * 1000, 1),
                "p99_ms": round(pct(xs, 0.99) * 1000, 1), "max_ms": round(max(xs, default=0) * 1000, 1)}

    out = {
        "memories": a.memories,
        "ingest_s_f32": round(ingest_s, 1),
        "reembed_s": round(job_end - job_start, 1),
        "tenants": status["tenants"],
        "reads_before": phase(reads, 0, job_start),
        "reads_during": phase(reads, job_start, job_end),
        "reads_after": phase(reads, job_end, 1e12),
        "writes_during": phase(writes, job_start, job_end),
        "recall10_before_f32_index": round(recall_before, 4),
        "recall10_after_int8_exact": round(exact_int8, 4),
        "recall10_after_int8_index": round(recall_after, 4),
        "server_peak_rss": hwm[0].split(":")[1].strip() if hwm else None,
        "check_after": check.stdout.strip(),
        "check_ok": check.returncode == 0,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
