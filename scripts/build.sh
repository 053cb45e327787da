#!/usr/bin/env bash
# Configures and builds paco into ${PACO_BUILD_DIR:-build} (Release, Ninja). Extra args go to cmake;
# PACO_WERROR=ON makes warnings in the project's own binaries errors (as CI builds).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PACO_BUILD_DIR:-$root/build}"
werror=()
[[ -n "${PACO_WERROR:-}" ]] && werror=(-DPACO_WERROR="$PACO_WERROR")  # CI: PACO_WERROR=ON
# Everything on, whatever an earlier scripts/demo.sh configured in the same directory (it builds
# paco_train alone, and without the device trainer where no GPU is visible).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPACO_BUILD_TESTS=ON \
  -DPACO_BUILD_EXAMPLES=ON -DPACO_BUILD_BENCH=ON -UPACO_TRAIN_CUDA "${werror[@]}" "$@" >/dev/null
cmake --build "$build" -j "${PACO_JOBS:-$(nproc)}"
