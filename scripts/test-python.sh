#!/usr/bin/env bash
# The Python package's tests (crates/evomem-py): a throwaway virtual
# environment under the target folder, maturin, pytest and numpy from the
# package index by name, `maturin develop` (dev profile, the shared target
# folder), then pytest. Run by scripts/test.sh after the Rust tests, which
# have built the `evomem` binary the tests start (`evomem eval` for the
# byte-identical check, `evomem serve` for the client).
#
# Tests that need ml-100k find it as the Rust tests do (EVOMEM_SHARED_DATA,
# ../shared/data, the fetched copy); missing under CI, they fail.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p "${CARGO_TARGET_DIR:-target}"
target=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)
venv="$target/pyvenv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# `mcp`: the official MCP client SDK (tests/test_mcp.py), pinned.
"$venv/bin/python" -m pip install -q --disable-pip-version-check maturin pytest numpy pandas "mcp==2.3.0"
# The second MCP client: the official TypeScript SDK in Node, pinned by the
# committed package-lock.json. Without Node, test_mcp.py skips its two
# Node tests (and fails them under CI).
if command -v npm >/dev/null; then
  npm ci --prefix crates/evomem-mcp/tests/node --no-audit --no-fund --loglevel=error >/dev/null
fi
# The binary the tests start: the one `cargo test --workspace` built for the
# CLI's own tests. `cargo build -p evomem` alone resolves features
# differently and would rebuild the whole binary, so it runs only when that
# binary is missing (this script run on its own).
if [ ! -x "$target/debug/evomem" ]; then
  CARGO_TARGET_DIR="$target" cargo build -q -p evomem --locked
fi
(
  cd crates/evomem-py
  VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" CARGO_TARGET_DIR="$target" \
    maturin develop --locked -q
)
EVOMEM_BIN="$target/debug/evomem" CARGO_TARGET_DIR="$target" \
  "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider crates/evomem-py/tests
