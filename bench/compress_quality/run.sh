#!/usr/bin/env bash
# about: DiLoCo P=4 on Brown per codec (+error feedback) vs fp32: validation bits/byte and bytes sent
# Rows: fp32, int8, int4, lgreco:int, topk:0.01 (workers push to a store) and powersgd:4 (ring
# all-reduce). LAST line: {"bench":"compress_quality","rows":[{"codec","val_bpb","bytes_sent",
# "ratio_bytes","rel_bpb",...}],"targets":{...},"config":{...}}.
# Usage: bench/run compress_quality [--rounds 6] [--inner 100] [--pretrain 300]
#        [--lgreco-every 2] [--codecs fp32,int8,...]
set -euo pipefail
: "${PACO_ROOT:?run through bench/run}" "${PACO_BUILD_DIR:?run through bench/run}"
cmake --build "$PACO_BUILD_DIR" --target bench_compress_quality >&2
if [[ -z "${PACO_KEEP_OPENBLAS_CORETYPE:-}" ]] && grep -q avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SKYLAKEX
fi
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cpus;" \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
exec "$PACO_BUILD_DIR/bench/compress_quality/bench_compress_quality" "$@"
