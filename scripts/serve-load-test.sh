#!/usr/bin/env bash
# Sustained mixed load against `evomem serve` on 127.0.0.1: start a service
# in a fresh data folder (MiniLM when fetched, else hashing; set
# EMBEDDER=hashing to measure the engine alone), then `evomem bench load`
# at RATE requests/s (default 100) for SECONDS (default 60), 20% adds of 10
# memories and 80% searches. Prints p50/p99 and the error count, and fails
# if any request failed. The service is stopped with SIGTERM (graceful).
#
#   scripts/serve-load-test.sh [RATE] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rate="${1:-100}"
secs="${2:-60}"
scripts/fetch-models.sh >&2 || true
cargo build --release --locked -p evomem >&2
bin="${CARGO_TARGET_DIR:-target}/release/evomem"
dir="$(mktemp -d /tmp/evomem-load.XXXXXX)"
key="$("$bin" serve keys add --tenant load --data-dir "$dir" 2>/dev/null)"
EVOMEM_SERVE__RATE_LIMIT_PER_S=0 "$bin" serve --data-dir "$dir" --bind 127.0.0.1:7731 --embedder "${EMBEDDER:-minilm}" \
  > "$dir/serve.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -sf http://127.0.0.1:7731/readyz >/dev/null 2>&1 && break
  sleep 0.2
done
"$bin" bench load --url http://127.0.0.1:7731 --key "$key" --rate "$rate" --duration "$secs"
kill -TERM $pid
wait $pid || true
trap - EXIT
cat "$dir/serve.log"
