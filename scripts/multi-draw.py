#!/usr/bin/env python3
"""evomem − RecBole over several training draws (issue 54).

    scripts/multi-draw.py ROOT

ROOT holds one folder per draw, `seed*/`, each the --out of
`evomem bench train --data ml-100k --models sasrec --same-epochs
--recbole-epochs 3 --seed S`. Prints per draw the paired figure from
bench-train.json; across draws (a) the mean of the per-draw means with a
Student-t interval over draws, (b) per user the mean over draws of the
difference, bootstrapped over users (1000 resamples, seed 0).
"""
import json, sys, random, statistics, glob, os
if len(sys.argv) != 2:
    sys.exit(__doc__)
root = sys.argv[1]
draws = sorted(p for p in glob.glob(os.path.join(root, "seed*")) if os.path.isdir(p) and os.path.exists(os.path.join(p, "bench-train.json")))
per_draw = []
users = {}
for d in draws:
    bt = json.load(open(os.path.join(d, "bench-train.json")))
    row = bt["rows"][0] if isinstance(bt, dict) and "rows" in bt else bt[0]
    per_draw.append((os.path.basename(d), row["hr1"], row["recbole_hr1"], row["paired_hr1"], row["ndcg10"], row["recbole_ndcg10"], row["paired_ndcg10"]))
    pol = [p for p in glob.glob(os.path.join(d, "*/sasrec/run/*")) if os.path.isdir(p)][0]
    ev = {json.loads(l)["user"]: json.loads(l) for l in open(os.path.join(pol, "per_user.jsonl"))}
    rb_path = glob.glob(os.path.join(d, "*/sasrec/recbole/out/per_user.jsonl"))[0]
    rb = {json.loads(l)["user"]: json.loads(l) for l in open(rb_path)}
    for u in ev:
        if u in rb:
            users.setdefault(u, []).append((ev[u]["HR@1"] - rb[u]["HR@1"], ev[u]["NDCG@10"] - rb[u]["NDCG@10"]))
for r in per_draw:
    print(f"{r[0]}: evomem {r[1]:.4f}/{r[4]:.4f} RecBole {r[2]:.4f}/{r[5]:.4f}; paired HR@1 {r[3][0]:+.4f} [{r[3][1]:+.4f}, {r[3][2]:+.4f}] NDCG@10 {r[6][0]:+.4f} [{r[6][1]:+.4f}, {r[6][2]:+.4f}]")
t975 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776}
for k, name in ((3, "HR@1"), (6, "NDCG@10")):
    m = [r[k][0] for r in per_draw]
    n = len(m)
    mean = statistics.mean(m)
    half = t975.get(n, 2.0) * statistics.stdev(m) / n ** 0.5 if n > 1 else float("nan")
    print(f"across {n} draws, {name}: mean {mean:+.4f}, t-interval over draws [{mean-half:+.4f}, {mean+half:+.4f}]")
full = [u for u, v in users.items() if len(v) == len(draws)]
for j, name in ((0, "HR@1"), (1, "NDCG@10")):
    x = [statistics.mean(v[j] for v in users[u]) for u in full]
    rng = random.Random(0)
    boots = sorted(statistics.mean(rng.choice(x) for _ in x) for _ in range(1000))
    print(f"per user, mean over draws, {name}: {statistics.mean(x):+.4f} [{boots[25]:+.4f}, {boots[974]:+.4f}] ({len(full)} users)")
