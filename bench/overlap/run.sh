#!/usr/bin/env bash
# about: DiLoCo vs CO2, eager updates, Streaming DiLoCo and the naive delayed update (sync overlapped with inner steps) on Brown
# Two ranks (threads) joined by asio_tcp on loopback, each link shaped so that a fp32 all-reduce
# of Δ takes --comm-ratio times the H inner steps. Rows: DiLoCo (Nesterov 0.7/0.9); CO2 as its
# authors' code runs it with two outer optimizers; eager updates with two; Streaming DiLoCo (3
# strided fragments, α = 0.5) with τ = 5 and τ = H/P − 1; the naive one-round-delayed update
# (Kale et al.'s baseline) with five. The overlapped row is chosen on validation and
# every row is reported on test. LAST line:
# {"bench":"overlap","rows":[{"method","outer","val_bpb","test_bpb","round_s","hidden",...}],
#  "chosen":..,"round_time_ratio":..,"test_bpb_delta":..,"config":{...}}.
# Usage: bench/run overlap [--rounds 8] [--inner 100] [--comm-ratio 1.0] [--pretrain 300]
#        [--seed 1] [--methods diloco,co2,eager,streaming,naive_delayed]
set -euo pipefail
: "${PACO_ROOT:?run through bench/run}" "${PACO_BUILD_DIR:?run through bench/run}"
cmake --build "$PACO_BUILD_DIR" --target bench_overlap >&2
if [[ -z "${PACO_KEEP_OPENBLAS_CORETYPE:-}" ]] && grep -q avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SKYLAKEX
fi
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cpus;" \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
exec "$PACO_BUILD_DIR/bench/overlap/bench_overlap" "$@"
