#!/usr/bin/env bash
# Schema fuzzing of `evomem serve` with schemathesis (from PyPI, in a venv
# under /tmp): every operation of /openapi.json with generated valid and
# invalid inputs. Fails on any 5xx and on any response that breaks the
# documented schema.
#
#   scripts/serve-fuzz.sh [MAX_EXAMPLES]   (default 200 per operation)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=/tmp/evomem-fuzz-venv
[ -x "$venv/bin/schemathesis" ] || { python3 -m venv "$venv"; "$venv/bin/pip" install -q schemathesis; }
cargo build --release --locked -p evomem >&2
bin="${CARGO_TARGET_DIR:-target}/release/evomem"
dir="$(mktemp -d /tmp/evomem-fuzz.XXXXXX)"
key="$("$bin" serve keys add --tenant fuzz --data-dir "$dir" 2>/dev/null)"
EVOMEM_SERVE__RATE_LIMIT_PER_S=0 "$bin" serve --data-dir "$dir" --bind 127.0.0.1:7732 \
  --embedder hashing > "$dir/serve.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -sf http://127.0.0.1:7732/readyz >/dev/null 2>&1 && break
  sleep 0.2
done
"$venv/bin/schemathesis" run http://127.0.0.1:7732/openapi.json \
  -H "Authorization: Bearer $key" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --max-examples "${1:-200}" --seed 42
