#!/usr/bin/env bash
# The full MovieLens-100K evaluation: every policy under the retrospective
# protocol (all 943 users), plus the evolving protocol on the `active` and
# `light` 100-user subsamples, as three runs that share the machine's cores.
# Prints each run's table and the wall time of the whole. Expects the data and
# model from scripts/quickstart.sh (or fetch-data.sh and fetch-models.sh).
#
#   EVOMEM_BIN         the binary   (default target/release/evomem, built if missing)
#   EVOMEM_DATA_DIR    datasets     (default ~/.cache/evomem/data)
#   EVOMEM_OUT         run folder   (default runs/full)
#   EVOMEM_POLICIES    policies     (default: all)
#   EVOMEM_FULL_SERIAL=1  run the three one after another instead
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${EVOMEM_BIN:-${CARGO_TARGET_DIR:-target}/release/evomem}"
if [[ ! -x "$bin" ]]; then
  cargo build --release --locked -p evomem >&2
fi
data="${EVOMEM_DATA_DIR:-$HOME/.cache/evomem/data}/ml-100k"
[[ -d "$data" ]] || { echo "full-eval: no dataset at $data (run scripts/fetch-data.sh)" >&2; exit 2; }
out="${EVOMEM_OUT:-runs/full}"
policies="${EVOMEM_POLICIES:-all}"   # all: every family that ranks (the family table)
mkdir -p "$out"

run() { # name, extra flags...
  local name=$1
  shift
  "$bin" eval --data "$data" --format recbole --policy "$policies" \
    --negatives 9 --seed 42 --out "$out/$name" "$@" >"$out/$name.log" 2>&1
}

start=$(date +%s.%N)
if [[ "${EVOMEM_FULL_SERIAL:-0}" == 1 ]]; then
  run retrospective --protocol retrospective
  run evolving-active --protocol evolving --users active
  run evolving-light --protocol evolving --users light
else
  run retrospective --protocol retrospective &
  p1=$!
  run evolving-active --protocol evolving --users active &
  p2=$!
  run evolving-light --protocol evolving --users light &
  p3=$!
  failed=0
  for p in $p1 $p2 $p3; do wait "$p" || failed=1; done
  if [[ $failed == 1 ]]; then
    for n in retrospective evolving-active evolving-light; do
      echo "== $n" >&2
      tail -5 "$out/$n.log" >&2
    done
    exit 1
  fi
fi
end=$(date +%s.%N)

for n in retrospective evolving-active evolving-light; do
  echo "== $n ($out/$n/report.md)"
  sed -n '/^policy /,$p' "$out/$n.log" | grep -v '^embedding cache'
done
awk -v s="$start" -v e="$end" 'BEGIN { printf "full evaluation: %.1f s wall\n", e - s }' | tee "$out/wall.txt"
