#!/usr/bin/env python3
"""Wakeup latency of this machine with and without background CPU work.

Two processes ping-pong one byte over pipes, 3,000 round trips 2 ms apart,
first alone and then beside N busy processes (spinners, or 64 MB memory
copiers) started in the idle scheduling class (`chrt --idle 0`) or at
niceness 19. Prints p50, p99, p99.7, p99.9 and the maximum per setting.

The service's noisy-neighbour floor (docs/notes/service-noisy-neighbours.md, "third round"): on a
2-core KVM guest with a 250 Hz tick, idle-class background work leaves the
median alone but makes 0.1-0.3% of wakeups wait whole ticks.

    scripts/wakeup-latency.py [--hogs 2] [--kind spin|mem] [--round-trips 3000]
"""
import argparse
import os
import subprocess
import sys
import time


def hog(kind):
    if kind == "mem":
        a = bytearray(os.urandom(1 << 20)) * 64
        b = bytearray(len(a))
        while True:
            b[:] = a
    while True:
        pass


def ping_pong(n):
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        while True:
            b = os.read(r1, 1)
            if not b or b == b"q":
                os._exit(0)
            os.write(w2, b"x")
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        os.write(w1, b"x")
        os.read(r2, 1)
        lat.append((time.perf_counter() - t) * 1e6)
        time.sleep(0.002)
    os.write(w1, b"q")
    os.waitpid(pid, 0)
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    return "p50 %.0f  p99 %.0f  p99.7 %.0f  p99.9 %.0f  max %.0f us" % (
        q(0.5), q(0.99), q(0.997), q(0.999), lat[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--kind", choices=["spin", "mem"], default="spin")
    ap.add_argument("--round-trips", type=int, default=3000)
    ap.add_argument("--hog", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.hog:
        hog(a.kind)
    print("alone:                 ", ping_pong(a.round_trips))
    for label, prefix in [("idle class", ["chrt", "--idle", "0"]),
                          ("niceness 19", ["nice", "-n", "19"])]:
        hogs = [subprocess.Popen(prefix + [sys.executable, __file__, "--hog", "--kind", a.kind])
                for _ in range(a.hogs)]
        try:
            time.sleep(0.5)
            print("%d %s %-11s" % (a.hogs, a.kind, label + ":"), ping_pong(a.round_trips))
        finally:
            for h in hogs:
                h.kill()
                h.wait()


if __name__ == "__main__":
    main()
