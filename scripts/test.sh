#!/usr/bin/env bash
# The test command: fetch what the tests need (the MiniLM model, a throwaway
# PostgreSQL server on loopback), then run the whole workspace's tests.
#
# Tests that read ../shared/data (the evaluation data) FAIL when it is missing
# and CI is set; outside CI they print a loud notice and skip that data.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-data.sh >/dev/null
scripts/fetch-models.sh >&2
eval "$(scripts/ci-postgres.sh)"

rm -f "${CARGO_TARGET_DIR:-target}/tmp/postgres-conformance.txt"
cargo test --workspace --locked

# Show that the PostgreSQL conformance suite really ran (libtest hides the
# output of passing tests).
cat "${CARGO_TARGET_DIR:-target}/tmp/postgres-conformance.txt" 2>/dev/null || {
  echo "postgres conformance marker missing" >&2
  exit 1
}
