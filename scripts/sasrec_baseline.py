"""Train RecBole's SASRec (or LightGCN, `--model LightGCN`) on a RecBole
atomic data set and score it on the exact candidate lists of an evomem run,
so the two are compared paired.

Usage (normally through scripts/sasrec-baseline.sh):

    python scripts/sasrec_baseline.py --data DIR --run RUN/seqmem --out RUN/sasrec

DIR holds NAME.inter (user_id, item_id, timestamp columns). RUN/seqmem is a
policy folder of `evomem eval` on the same data and target; its
decisions.jsonl gives, per user, the target and the 10 candidates. The
model is trained on every interaction before each user's last two (RecBole's
leave-one-out split by time, the same split evomem uses), chosen by
validation NDCG@10 (RecBole's own uniform 9-negative validation), then each
evomem decision is scored with the user's full history before its target.
Ties are broken by candidate position, as evomem's decider does. The output
folder holds per_user.jsonl in evomem's format (so `evomem compare` pairs it
with any evomem policy), metrics.json, and the training log.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="folder with NAME.inter")
    p.add_argument("--run", required=True, help="evomem policy folder with decisions.jsonl")
    p.add_argument("--out", required=True, help="output folder (per_user.jsonl, metrics.json)")
    p.add_argument("--model", default="SASRec", choices=["SASRec", "LightGCN"],
                   help="SASRec (CE loss, RecBole's defaults) or LightGCN (3 layers, BPR)")
    p.add_argument("--n-layers", type=int, default=3, help="LightGCN: propagation layers (the paper's 3)")
    p.add_argument("--reg-weight", type=float, default=1e-4, help="LightGCN: RecBole's reg_weight")
    p.add_argument("--epochs", type=int, default=50, help="training epochs at most")
    p.add_argument("--stopping-step", type=int, default=5, help="epochs without validation gain before stopping")
    p.add_argument("--max-len", type=int, default=50, help="MAX_ITEM_LIST_LENGTH")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--budget-min", type=float, default=0.0,
                   help="stop training after this many minutes (0: no limit); the best validation checkpoint is kept")
    return p.parse_args()


def read_decisions(path):
    """Per user: (target token, candidate tokens, evomem's decision order)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                d = json.loads(line)
                out.append((str(d["user"]), str(d["target"]), [str(c) for c in d["candidates"]], d))
            except (KeyError, ValueError) as e:
                sys.exit(f"{path}:{lineno}: not an evomem decision ({e})")
    return out


def read_sequences(inter_path):
    """Each user's items in time order (stable on equal timestamps, as evomem sorts)."""
    rows = []
    with open(inter_path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        names = [h.split(":")[0] for h in header]
        try:
            iu, ii, it = names.index("user_id"), names.index("item_id"), names.index("timestamp")
        except ValueError as e:
            sys.exit(f"{inter_path}:1: header lacks a column ({e})")
        for n, line in enumerate(f, 2):
            parts = line.rstrip("\n").split("\t")
            try:
                rows.append((parts[iu], float(parts[it]), n, parts[ii]))
            except (IndexError, ValueError) as e:
                sys.exit(f"{inter_path}:{n}: bad row ({e})")
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    seqs = {}
    for u, _, _, i in rows:
        seqs.setdefault(u, []).append(i)
    return seqs


def metric_row(rank, n):
    row = {}
    for k in (1, 3, 5, 10):
        row[f"HR@{k}"] = 1.0 if rank <= k else 0.0
    for k in (1, 3, 5, 10):
        row[f"NDCG@{k}"] = 1.0 / math.log2(rank + 1) if rank <= k else 0.0
    row["MRR"] = 1.0 / rank
    return row


def main():
    a = parse_args()
    import numpy as np
    import torch
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.general_recommender import LightGCN
    from recbole.model.sequential_recommender import SASRec
    from recbole.trainer import Trainer
    from recbole.utils import init_logger, init_seed

    class OutOfBudget(Exception):
        pass

    class BudgetTrainer(Trainer):
        """RecBole's trainer with a wall-clock budget checked before each epoch."""

        def __init__(self, config, model, budget_s):
            super().__init__(config, model)
            self.budget_s = budget_s
            self.t_start = time.time()
            self.epochs_run = 0
            self.epoch_seconds = []

        def _train_epoch(self, train_data, epoch_idx, *args, **kwargs):
            if self.budget_s > 0 and time.time() - self.t_start > self.budget_s:
                raise OutOfBudget()
            self.epochs_run = epoch_idx + 1
            t = time.time()
            out = super()._train_epoch(train_data, epoch_idx, *args, **kwargs)
            self.epoch_seconds.append(round(time.time() - t, 2))
            return out

    torch.set_num_threads(a.threads)
    inter = [f for f in os.listdir(a.data) if f.endswith(".inter")]
    if len(inter) != 1:
        sys.exit(f"{a.data}: expected one .inter file, found {inter}")
    name = inter[0][: -len(".inter")]
    work = tempfile.mkdtemp(prefix="sasrec-")
    os.makedirs(os.path.join(work, name))
    os.symlink(os.path.abspath(os.path.join(a.data, inter[0])), os.path.join(work, name, inter[0]))
    os.makedirs(a.out, exist_ok=True)

    cfg = {
        "data_path": work,
        "checkpoint_dir": os.path.join(work, "saved"),
        "USER_ID_FIELD": "user_id",
        "ITEM_ID_FIELD": "item_id",
        "TIME_FIELD": "timestamp",
        "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
        "MAX_ITEM_LIST_LENGTH": a.max_len,
        "epochs": a.epochs,
        "stopping_step": a.stopping_step,
        "train_batch_size": 2048,
        "eval_batch_size": 4096,
        "eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "group_by": "user", "mode": "uni9"},
        "metrics": ["Hit", "NDCG"],
        "topk": [1, 10],
        "valid_metric": "NDCG@10",
        "seed": a.seed,
        "reproducibility": True,
        "device": "cpu",
        "use_gpu": False,
        "show_progress": False,
        "log_wandb": False,
    }
    if a.model == "SASRec":
        cfg.update({"train_neg_sample_args": None, "loss_type": "CE"})
    else:
        cfg.update({"n_layers": a.n_layers, "reg_weight": a.reg_weight, "embedding_size": 64})
    sys.argv = sys.argv[:1]  # RecBole reads --key=value flags from argv
    config = Config(model=a.model, dataset=name, config_dict=cfg)
    init_seed(config["seed"], config["reproducibility"])
    init_logger(config)
    t0 = time.time()
    dataset = create_dataset(config)
    train, valid, _test = data_preparation(config, dataset)
    model = (SASRec if a.model == "SASRec" else LightGCN)(config, train.dataset).to("cpu")
    trainer = BudgetTrainer(config, model, a.budget_min * 60.0)
    try:
        trainer.fit(train, valid, saved=True, show_progress=False)
    except OutOfBudget:
        pass
    best_valid, best_result = trainer.best_valid_score, trainer.best_valid_result
    train_s = time.time() - t0
    ckpt = trainer.saved_model_file
    state = torch.load(ckpt, map_location="cpu")
    model.load_state_dict(state["state_dict"])
    model.eval()

    decisions = read_decisions(os.path.join(a.run, "decisions.jsonl"))
    seqs = read_sequences(os.path.join(a.data, inter[0]))
    tok = dataset.field2token_id["item_id"]
    mism = 0
    rows = []
    if a.model == "SASRec":
        items_emb = model.item_embedding.weight.detach()
    else:
        with torch.no_grad():
            users_emb, items_emb = model.forward()
        utok = dataset.field2token_id["user_id"]
    batch = []

    def flush(batch):
        if not batch:
            return
        if a.model == "LightGCN":
            for hist, cand, tpos, d in batch:
                u = users_emb[utok[str(d["user"])]]
                s = (items_emb[torch.tensor(cand)] @ u).tolist()
                st = s[tpos]
                rank = 1 + sum(1 for j, x in enumerate(s) if x > st or (x == st and j < tpos))
                row = {"user": d["user"], "decision_id": d["decision_id"], "at": d["at"], "target": d["target"],
                       "rank": rank, "n_candidates": len(cand)}
                row.update(metric_row(rank, len(cand)))
                rows.append(row)
            return
        L = a.max_len
        seq = torch.zeros((len(batch), L), dtype=torch.long)
        lens = torch.zeros(len(batch), dtype=torch.long)
        for r, (hist, _, _, _) in enumerate(batch):
            h = hist[-L:]
            seq[r, : len(h)] = torch.tensor(h, dtype=torch.long)
            lens[r] = max(len(h), 1)
        with torch.no_grad():
            out = model.forward(seq, lens)
        for r, (_, cand, tpos, d) in enumerate(batch):
            s = (items_emb[torch.tensor(cand)] @ out[r]).tolist()
            st = s[tpos]
            rank = 1 + sum(1 for j, x in enumerate(s) if x > st or (x == st and j < tpos))
            row = {"user": d["user"], "decision_id": d["decision_id"], "at": d["at"], "target": d["target"],
                   "rank": rank, "n_candidates": len(cand)}
            row.update(metric_row(rank, len(cand)))
            rows.append(row)

    for user, target, cands, d in decisions:
        seq = seqs.get(user, [])
        # The target's position in the user's sequence: evomem's test target is
        # the last interaction, validation the one before.
        try:
            pos = len(seq) - 1 - seq[::-1].index(target)
        except ValueError:
            sys.exit(f"user {user}: target {target} not in the data")
        if pos not in (len(seq) - 1, len(seq) - 2):
            mism += 1
        hist = [tok[i] for i in seq[:pos] if i in tok]
        cand = [tok.get(c, 0) for c in cands]
        batch.append((hist, cand, cands.index(target), d))
        if len(batch) == 1024:
            flush(batch)
            batch = []
    flush(batch)

    with open(os.path.join(a.out, "per_user.jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    n = len(rows)
    mean = {k: sum(r[k] for r in rows) / n for k in rows[0] if k.startswith(("HR", "NDCG", "MRR"))}
    summary = {
        "model": ("RecBole SASRec (1.2.1), CE loss, default hyper-parameters but the epochs cap"
                  if a.model == "SASRec" else
                  f"RecBole LightGCN (1.2.1), {a.n_layers} layers, reg_weight {a.reg_weight}, BPR"),
        "epoch_seconds": trainer.epoch_seconds,
        "data": os.path.abspath(a.data),
        "candidates_from": os.path.abspath(a.run),
        "decisions": n,
        "targets_not_last_two": mism,
        "train_seconds": round(train_s, 1),
        "epochs_cap": a.epochs,
        "epochs_run": trainer.epochs_run,
        "budget_min": a.budget_min,
        "max_item_list_length": a.max_len,
        "stopping_step": a.stopping_step,
        "best_valid_recbole_uni9": {k: float(v) for k, v in dict(best_result).items()},
        "best_valid_score": float(best_valid),
        "metrics": mean,
        "seed": a.seed,
        "threads": a.threads,
    }
    with open(os.path.join(a.out, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
