#!/usr/bin/env bash
# The test command: fetch what the tests need (the MiniLM model, a throwaway
# PostgreSQL server on loopback), then run the whole workspace's tests and
# the Python package's (scripts/test-python.sh).
#
# Tests that read ../shared/data (the evaluation data) FAIL when it is missing
# and CI is set; outside CI they print a loud notice and skip that data.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-data.sh >/dev/null
scripts/fetch-models.sh >&2
scripts/fetch-smollm2.sh >&2
eval "$(scripts/ci-postgres.sh)"

rm -f "${CARGO_TARGET_DIR:-target}/tmp/postgres-conformance.txt"
# Tests that need a real dataset they cannot find (neither ../shared/data nor
# what fetch-data.sh fetched) skip with a notice that libtest hides; each
# such skip is appended here and counted below. Under CI they fail instead.
skip_log=$(mktemp)
trap 'rm -f "$skip_log"' EXIT
EVOMEM_SKIP_LOG="$skip_log" cargo test --workspace --locked
if [ -s "$skip_log" ]; then
  echo "!!! $(wc -l <"$skip_log") data test(s) SKIPPED for missing datasets: $(sort "$skip_log" | uniq -c | tr -s ' ' | tr '\n' ';') (set EVOMEM_SHARED_DATA) !!!" >&2
fi

# The Python package (crates/evomem-py): maturin develop and pytest in a
# throwaway virtual environment.
scripts/test-python.sh

# Show that the PostgreSQL conformance suite really ran (libtest hides the
# output of passing tests).
cat "${CARGO_TARGET_DIR:-target}/tmp/postgres-conformance.txt" 2>/dev/null || {
  echo "postgres conformance marker missing" >&2
  exit 1
}
