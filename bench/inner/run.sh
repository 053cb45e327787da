#!/usr/bin/env bash
# about: DiLoCo P=4 on Brown at equal tokens: AdamW vs Muon inner (MuLoCo), 2/4-bit EF deltas, states synced every H / 4H / never (DES-LOC)
# Rows (--rows name:optimizer:codec:period,...): adamw, adamw_int2, muon, muon_int4, muon_int2,
# muon_int2_minmax (4 levels per block: a scale and a minimum), adamw_desloc_H, adamw_desloc_4H, muon_desloc_4H. LAST line: {"bench":"inner","rows":[{"name",
# "optimizer","bits","codec","desloc_period","bpb","val_bpb","bytes","payload_bytes",...}],"targets":{...}}.
# Usage: bench/run inner [--rounds 8] [--inner 50] [--pretrain 300] [--base-lr 2e-3] [--lr 2e-3]
#        [--muon-lr 0.02] [--muon-adamw-lr 0 (= --lr)] [--rows ...]
set -euo pipefail
: "${PACO_ROOT:?run through bench/run}" "${PACO_BUILD_DIR:?run through bench/run}"
cmake --build "$PACO_BUILD_DIR" --target bench_inner >&2
if [[ -z "${PACO_KEEP_OPENBLAS_CORETYPE:-}" ]] && grep -q avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SKYLAKEX
fi
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cpus;" \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
exec "$PACO_BUILD_DIR/bench/inner/bench_inner" "$@"
