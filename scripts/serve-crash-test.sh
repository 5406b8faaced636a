#!/usr/bin/env bash
# The full crash test of `evomem serve`: writers add memories while the
# server is killed with SIGKILL, ROUNDS times (default 100), on SQLite and on
# a throwaway PostgreSQL; after every restart each acknowledged write must be
# present and no batch half-applied, and `evomem serve check` must pass;
# every round must acknowledge a write and kill a request in flight.
# CI runs the same test with 5 rounds.
#
#   scripts/serve-crash-test.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/ci-postgres.sh)"
EVOMEM_CRASH_ROUNDS="${1:-100}" cargo test --locked -p evomem --test serve_crash -- --nocapture --test-threads 1
