#!/usr/bin/env bash
# The soak test of `evomem serve` (crates/evomem-cli/tests/serve_soak.rs):
# two calm tenants and an abusive one on one process for MINUTES minutes
# (default 10), killed with SIGKILL and restarted every KILL_EVERY_S
# seconds (default 120); then no acknowledged write lost or duplicated,
# `evomem serve check` passing, peak RSS under 512 MiB + 24 KiB per memory held, and the figures
# printed. CI runs the same test for 3 minutes (its default).
#
#   scripts/serve-soak.sh [MINUTES] [KILL_EVERY_S]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-10}"
EVOMEM_SOAK_SECS=$((minutes * 60)) EVOMEM_SOAK_KILL_EVERY_S="${2:-120}" \
  cargo test --locked --release -p evomem --test serve_soak -- --nocapture
