#!/usr/bin/env python3
"""The torch peers of `evomem bench embed` (issue 41): sentence-transformers
all-MiniLM-L6-v2 in f32 and with torch's dynamic int8 quantization of every
Linear layer (`quantize_dynamic` with its default settings: weights int8
with one scale per tensor, activations quantized with one scale per input
tensor at run time), on the benchmark's own texts, from the local model
folder (no network).

    evomem bench embed --texts-out /tmp/bench-texts.json
    python scripts/bench-torch-embed.py /tmp/bench-texts.json \
        ~/.cache/evomem/models/all-MiniLM-L6-v2 --threads 1 2

Prints one row per (precision, threads): load s, short and long texts per
second (best of --reps passes, batch --batch) and the median latency of one
short text alone (--queries calls), as `bench embed` measures its side.
Needs torch and sentence-transformers (CPU is enough).
"""
import argparse
import json
import os
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def measure(model, texts, batch, reps, queries):
    short, long = texts["short"], texts["long"]
    model.encode(short[:batch], batch_size=batch)  # warm-up
    out = {}
    for key, xs in (("short", short), ("long", long)):
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            model.encode(xs, batch_size=batch, normalize_embeddings=True)
            best = min(best, time.perf_counter() - t)
        out[key] = len(xs) / best
    lat = []
    for t in (short * (queries // max(len(short), 1) + 1))[:queries]:
        s = time.perf_counter()
        model.encode([t], batch_size=1, normalize_embeddings=True)
        lat.append(time.perf_counter() - s)
    lat.sort()
    out["query_ms"] = lat[len(lat) // 2] * 1e3
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("texts")
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--queries", type=int, default=64)
    a = ap.parse_args()
    import torch
    from sentence_transformers import SentenceTransformer

    try:
        from torch.ao.quantization import quantize_dynamic
    except ImportError:  # older torch
        from torch.quantization import quantize_dynamic
    texts = json.load(open(a.texts))
    print(f"torch {torch.__version__}, {len(texts['short'])} short and "
          f"{len(texts['long'])} long texts, batch {a.batch}")
    print(f"{'implementation':<40} {'load s':>7} {'short/s':>9} {'long/s':>8} {'query ms':>9}")
    for threads in a.threads:
        torch.set_num_threads(threads)
        for precision in ("f32", "int8-dynamic"):
            t = time.perf_counter()
            m = SentenceTransformer(a.model_dir, device="cpu")
            m.max_seq_length = 256
            if precision != "f32":
                m = quantize_dynamic(m, {torch.nn.Linear}, dtype=torch.qint8)
            load = time.perf_counter() - t
            with torch.inference_mode():
                r = measure(m, texts, a.batch, a.reps, a.queries)
            name = f"torch {precision}, {torch.get_num_threads()} threads"
            print(f"{name:<40} {load:>7.3f} {r['short']:>9.1f} {r['long']:>8.1f} {r['query_ms']:>9.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
