#!/usr/bin/env bash
# Cost curves up to 1M interactions (issue 16, item 4): every policy at
# 100k, 300k and 1M ml-100k-shaped interactions (evomem_eval::scalegen),
# each in its own child process; wall time, peak RSS, fitted log-log
# exponents and bytes per interaction in OUT/report.md and OUT/scale.json,
# plots in OUT/time.svg and OUT/rss.svg.
#
#   scripts/scale-curves.sh [OUT] [extra `bench scale` flags]
#
# The 1M runs take a while on two cores: the script runs the small sizes
# first, then 1M in the background with nohup (log: OUT.1m.log) and
# `--resume`, so rerunning it keeps every finished cell. Add
# `--embedder minilm` to include the model's cost (default: hashing, the
# engine's growth alone).
set -euo pipefail
OUT=${1:-/tmp/evomem-scale}
shift || true
BIN=${EVOMEM_BIN:-target/release/evomem}
if [ -z "${EVOMEM_BIN:-}" ]; then
  # Every feature: the predict families run through `evomem arena delayed`
  # (a lean binary left by scripts/quickstart.sh has no arenas).
  nice cargo build --release --locked -p evomem
fi
# Copy the binary so that a rebuild during the long runs does not swap it.
mkdir -p "$OUT"
cp "$BIN" "$OUT/evomem"
nice "$OUT/evomem" bench scale --sizes 100000,300000 --resume --out "$OUT" "$@"
nohup nice "$OUT/evomem" bench scale --sizes 100000,300000,1000000 --resume --out "$OUT" "$@" \
  > "$OUT.1m.log" 2>&1 &
echo "1M runs in the background (pid $!); log: $OUT.1m.log; report: $OUT/report.md"
