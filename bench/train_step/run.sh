#!/usr/bin/env bash
# about: GPT training step tokens/s vs PyTorch (as installed and tuned), 3 sizes x 1-2 threads
set -euo pipefail
cmake --build "$PACO_BUILD_DIR" --target bench_train_step bench_peak_flops bench_gemm >&2
exec /usr/bin/python3 "$PACO_ROOT/bench/train_step/run.py" "$@"
