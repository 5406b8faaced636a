"""A memory policy written in Python, compared with `seqmem` and `bpr`.

`genre_memory` keeps one event record per observed interaction in the
user's namespace (written through ops, so the op log, replay and `evomem
inspect` work) and ranks candidates by how much their genres overlap the
genres of the user's well-rated events, newest weighted most, plus a
popularity prior counted from what it has observed. It runs in the same
leakage-free loop as the Rust families.

    pip install ./crates/evomem-py      # or: cd crates/evomem-py && maturin develop
    python examples/python_policy.py [DATA_DIR] [USERS]

DATA_DIR defaults to $EVOMEM_DATA_DIR/ml-100k, else ~/.cache/evomem/data/ml-100k
(where scripts/fetch-data.sh and the quickstart put it); USERS (default 200) is
a seeded sample of users, as `evomem eval --users N`.
"""

import math
import os
import sys
from pathlib import Path

import evomem
from evomem import ops


class GenreMemory:
    name = "genre_memory"

    def __init__(self, window: int = 30, decay: float = 0.95, prior: float = 1.0):
        self.window = window
        self.decay = decay
        self.prior = prior
        self.seen = {}  # item -> observed interactions (derived state, rebuilt from observe)

    def observe(self, ctx, e):
        """Remember the event: item, its genres and the rating."""
        self.seen[e.item] = self.seen.get(e.item, 0) + 1
        genres = ctx.item(e.item)["categories"]
        return [
            ops.create(
                f"user:{e.user}:ev:{e.time}",
                ops.user_ns(e.user),
                f"rated {e.rating}: {ctx.item(e.item)['title']}",
                ctx.now,
                fields={"genres": genres, "rating": e.rating},
                sources=[e.time],
            )
        ]

    def recall(self, ctx, q):
        """Score candidates by genre overlap with the recent liked events."""
        events = sorted(ctx.records(ops.user_ns(q.user)), key=lambda r: r["created_at"], reverse=True)
        weight, taste, used = 1.0, {}, []
        for r in events[: self.window]:
            liked = (r["fields"].get("rating") or 3) - 2.5
            for g in r["fields"]["genres"]:
                taste[g] = taste.get(g, 0.0) + weight * liked
            used.append((r["id"], weight))
            weight *= self.decay
        total = sum(abs(v) for v in taste.values()) or 1.0
        scores = [
            sum(taste.get(g, 0.0) for g in ctx.item(i)["categories"]) / total
            + self.prior * math.log1p(self.seen.get(i, 0))
            for i in q.candidates
        ]
        return {"scores": scores, "used": used}


def main():
    data_root = Path(os.environ.get("EVOMEM_DATA_DIR") or Path.home() / ".cache" / "evomem" / "data")
    data_dir = Path(sys.argv[1]).expanduser() if len(sys.argv) > 1 else data_root.expanduser() / "ml-100k"
    if not data_dir.is_dir():
        sys.exit(f"no data folder {data_dir}: run scripts/fetch-data.sh, or pass DATA_DIR")
    users = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    data = evomem.load(data_dir, format="recbole")
    res = evomem.evaluate(data, policies=["seqmem", "bpr", GenreMemory()], users=users, out="runs/python-policy")
    print(res.table())
    print("\ngenre_memory - seqmem (paired bootstrap):")
    print(evomem.compare(res["seqmem"], res["genre_memory"]))
    print(f"\nrun folder: {res.out} (evomem inspect / explain / compare read it)")


if __name__ == "__main__":
    main()
