#!/usr/bin/env bash
# Configures and builds paco into ${PACO_BUILD_DIR:-build} (Release, Ninja). Extra args go to cmake.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PACO_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "${PACO_JOBS:-$(nproc)}"
