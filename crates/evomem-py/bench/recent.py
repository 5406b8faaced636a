"""Python-policy overhead: `recent` written in Python against the Rust
`recent` on all of ml-100k (retrospective protocol, 9 negatives, seed 42).

A benchmark, not a test: it runs each once and prints the policies' wall
times and their ratio. The Python policy does what
`crates/evomem-policy/src/families/baselines/recent.rs` does (the user's
last k=5 items, newest first; a candidate scores the decayed sum of cosine
similarities, decay 0.8, over MiniLM embeddings of the items' full texts),
so the two should score alike and the ratio is the cost of crossing into
Python per call.

    python crates/evomem-py/bench/recent.py [DATA_DIR]

DATA_DIR defaults to $EVOMEM_SHARED_DATA/ml-100k or ../shared/data/ml-100k.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

import evomem


class PyRecent:
    """`recent` in Python."""

    name = "py-recent"

    def __init__(self, k: int = 5, decay: float = 0.8):
        self.k = k
        self.decay = decay
        self.last: dict[str, deque] = {}
        self.vec: dict[str, np.ndarray] = {}

    def observe(self, ctx, e):
        q = self.last.setdefault(e.user, deque())
        try:
            q.remove(e.item)
        except ValueError:
            pass
        q.appendleft(e.item)
        while len(q) > self.k:
            q.pop()

    def _vectors(self, ctx, items):
        missing = [i for i in items if i not in self.vec]
        if missing:
            for i, v in zip(missing, ctx.embed([ctx.item_text(i) for i in missing])):
                self.vec[i] = np.asarray(v, dtype=np.float32)
        return np.stack([self.vec[i] for i in items]) if items else np.zeros((0, 1), np.float32)

    def recall(self, ctx, q):
        past = list(self.last.get(q.user, ()))
        cands = self._vectors(ctx, list(q.candidates))
        if not past:
            return [0.0] * len(q.candidates)
        weights = self.decay ** np.arange(len(past))
        sims = cands @ self._vectors(ctx, past).T
        return (sims.astype(np.float64) @ weights).tolist()


def main() -> None:
    if len(sys.argv) > 1:
        data_dir = Path(sys.argv[1])
    else:
        root = os.environ.get("EVOMEM_SHARED_DATA") or str(Path(__file__).resolve().parents[4] / "shared" / "data")
        data_dir = Path(root) / "ml-100k"
    data = evomem.load(data_dir, format="recbole")
    print(f"{data!r}", flush=True)
    rows = []
    for pol in ["recent", PyRecent()]:
        t0 = time.perf_counter()
        res = evomem.evaluate(data, policies=[pol], ops_log=False)
        total = time.perf_counter() - t0
        (p,) = res
        rows.append((p.spec, p.wall_s, total, p.metrics["NDCG@10"], p.metrics["HR@1"]))
        print(f"{p.spec:<10} policy wall {p.wall_s:7.2f} s  evaluate() {total:7.2f} s  NDCG@10 {p.metrics['NDCG@10']:.4f}  HR@1 {p.metrics['HR@1']:.4f}", flush=True)
    (_, rust_s, _, _, _), (_, py_s, _, _, _) = rows
    print(f"ratio python/rust (policy wall time): {py_s / rust_s:.2f}x; model {res.model}")


if __name__ == "__main__":
    main()
