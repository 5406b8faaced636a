#!/usr/bin/env bash
# RecBole's SASRec beside an evomem run, scored on the run's own candidate
# lists so that `evomem compare` pairs them user by user.
#
#   scripts/sasrec-baseline.sh DATA RUN/POLICY OUT [flags of sasrec_baseline.py]
#
# DATA: a folder with NAME.inter (RecBole atomic file); RUN/POLICY: a policy
# folder of `evomem eval` on DATA (its decisions.jsonl gives the targets and
# candidates); OUT: where per_user.jsonl and metrics.json go. Then:
#   evomem compare RUN/POLICY OUT
#
# Sets up .venv-recbole (recbole 1.2.1 needs numpy < 2, pandas < 2.2 and
# scipy < 1.12, whose dok_matrix its LightGCN still updates in place;
# torch runs on the CPU). Training is slow on a CPU: see
# docs/notes/generalisation-fits.md for the budget used there.
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,14p' "$0" >&2
  exit 2
fi
data=$1 run=$2 out=$3
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-recbole"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
fi
if ! "$venv/bin/python" -c "import recbole, torch" 2>/dev/null; then
  echo "installing recbole 1.2.1 and torch 2.4.1 into $venv (large download) ..." >&2
  "$venv/bin/pip" install --quiet "numpy<2" "pandas<2.2" "scipy<1.12" "torch==2.4.1" "recbole==1.2.1"
fi
[ -f "$run/decisions.jsonl" ] || { echo "$run: no decisions.jsonl (a policy folder of evomem eval?)" >&2; exit 2; }
exec "$venv/bin/python" "$root/scripts/sasrec_baseline.py" --data "$data" --run "$run" --out "$out" "$@"
