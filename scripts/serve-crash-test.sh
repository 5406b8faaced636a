#!/usr/bin/env bash
# The full crash test of `evomem serve`: writers add memories while the
# server is killed with SIGKILL, ROUNDS times (default 20), on SQLite and on
# a throwaway PostgreSQL; after every restart each acknowledged write must be
# present and no batch half-applied, and `evomem serve check` must pass.
# CI runs the same test with 3 rounds.
#
#   scripts/serve-crash-test.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/ci-postgres.sh)"
EVOMEM_CRASH_ROUNDS="${1:-20}" cargo test --locked -p evomem --test serve_crash -- --nocapture --test-threads 1
