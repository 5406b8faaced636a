#!/usr/bin/env python3
"""First start of a new data folder on PostgreSQL (a new instance's): time
from spawn to the "listening" line with N tenants in the keys file and
none of their schemas in the database.

Usage:
  scripts/pg-first-start.py --store postgres://USER@HOST/DB [--tenants 300]
      [--runs 2] --bin before=/tmp/evomem-old --bin after=target/release/evomem

Each run gets a fresh data folder, and the tenants' schemas (evomem_t_pgsN)
are dropped before it (with `psql`), so every binary starts on the same
empty database. The keys file is made once, with the last binary given.
Prints one line per run. Needs Python 3, `psql` and the binaries; use a
database of its own (the schemas it makes are dropped at the end).
"""

import argparse
import os
import subprocess
import tempfile
import time

LIST = "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'evomem\\_t\\_pgs%'"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--tenants", type=int, default=300)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--bin", action="append", required=True, help="LABEL=PATH")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin]
    root = tempfile.mkdtemp(prefix="evomem-pg-first-start-")
    keys_dir = os.path.join(root, "keys")
    os.makedirs(keys_dir)
    keys_file = os.path.join(keys_dir, "keys.toml")
    for t in range(a.tenants):
        subprocess.run([bins[-1][1], "serve", "keys", "add", "--tenant", f"pgs{t}",
                        "--data-dir", keys_dir, "--keys-file", keys_file],
                       check=True, capture_output=True)

    def drop():
        # One schema a transaction: all at once runs out of lock slots.
        names = subprocess.run(["psql", a.store, "-At", "-c", LIST], check=True,
                               capture_output=True, text=True).stdout.split()
        for i in range(0, len(names), 20):
            sql = "".join(f"DROP SCHEMA {n} CASCADE;" for n in names[i:i + 20])
            subprocess.run(["psql", a.store, "-q", "-c", sql], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    for run in range(a.runs):
        for label, path in bins:
            drop()
            folder = tempfile.mkdtemp(prefix=f"{label}-", dir=root)
            t0 = time.time()
            p = subprocess.Popen([path, "serve", "--data-dir", folder, "--embedder", "hashing",
                                  "--store", a.store, "--keys-file", keys_file,
                                  "--bind", "127.0.0.1:0"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            line = p.stdout.readline()
            took = time.time() - t0
            p.terminate()
            p.wait()
            ok = "listening" in line
            print(f"{label} run {run}: {took:.2f} s to {'listening' if ok else repr(line)}", flush=True)
    drop()


if __name__ == "__main__":
    main()
