#!/usr/bin/env bash
# about: GPT training step on the GPU: tokens/s and MFU against the bf16/TF32 GEMM peak measured in the same run
# Three sizes up to GPT-2 small (124M, ctx 1024): the device inner loop (forward, backward, clip,
# AdamW; bf16 GEMMs by default) timed over steps after a warm-up, medians; then a profiling pass splits a
# step into phases (linear, attention, elementwise, loss, optimizer). The peaks come from large
# cuBLAS GEMMs (bf16 in / fp32 accumulate, and TF32) in the same process.
# LAST line: {"bench":"train_step_gpu","device":..,"rows":[{"params","ctx","tokens_per_s","mfu",..}]}
# Usage: bench/run train_step_gpu [--steps N] [--sizes small,medium,gpt2] [--math bf16|tf32|fp32]
set -euo pipefail
: "${PACO_ROOT:?run through bench/run}" "${PACO_BUILD_DIR:?run through bench/run}"
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
  echo "train_step_gpu: no CUDA GPU on this machine (nvidia-smi finds none); nothing to measure" >&2
  exit 77
fi
cmake --build "$PACO_BUILD_DIR" --target bench_train_step_gpu >&2
echo "driver: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)" >&2
exec "$PACO_BUILD_DIR/bench/train_step_gpu/bench_train_step_gpu" "$@"
