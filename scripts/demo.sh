#!/usr/bin/env bash
# The main job: installs what is missing (Debian packages, the Brown corpus), builds paco_train
# and trains on Brown with a progress display and a final results table. Safe to run again.
#   bash scripts/demo.sh [dipaco|lm] [paco_train arguments, e.g. --set dipaco.rounds=4]
#   dipaco (default): DiPaCo 2x2, a store and 4 worker processes over TCP,
#                     examples/configs/dipaco_brown.toml
#   lm:               the byte-level GPT on one machine, examples/configs/lm_brown.toml
set -euo pipefail
job=dipaco
if [[ "${1:-}" == lm || "${1:-}" == dipaco ]]; then job="$1"; shift; fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/deps.sh" demo
build="${PACO_BUILD_DIR:-$root/build}"
# Only paco_train is built; the tests and benchmarks are configured by scripts/test.sh, which
# installs what they need. The device trainer only where a GPU is visible.
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then cuda=ON; fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPACO_BUILD_TESTS=OFF \
  -DPACO_BUILD_BENCH=OFF -DPACO_TRAIN_CUDA="$cuda" >/dev/null
cmake --build "$build" -j "$(nproc)" --target paco_train
# OpenBLAS 0.3.21 does not know this generation of AVX-512 CPUs and would fall back to AVX2
# kernels at half speed; name an AVX-512 core type when the CPU has AVX-512.
if [[ -z "${PACO_KEEP_OPENBLAS_CORETYPE:-}" ]] && grep -q avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SKYLAKEX
fi
echo "[demo] OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
cd "$root"
config="$root/examples/configs/lm_brown.toml"
[[ "$job" == dipaco ]] && config="$root/examples/configs/dipaco_brown.toml"
# The DiPaCo launcher refuses to overwrite a previous run unless told: the demo starts a fresh
# one each time unless --resume (or --fresh) is among the arguments.
extra=()
if [[ "$job" == dipaco && " $* " != *" --resume "* && " $* " != *" --fresh "* ]]; then
  extra=(--fresh)
  echo "[demo] a fresh run (a previous one in its output directory is replaced; pass --resume to continue it)"
fi
exec "$build/examples/paco_train/paco_train" --config "$config" "${extra[@]}" "$@"
