#!/usr/bin/env bash
# about: DiPaCo paper's Table 1 at our scale on Brown (test split, one scorer): dense, dense 4x, DiLoCo P=4, flat MoE P=4 (k-means and DiPaCo-routed), DiPaCo 2x2
set -euo pipefail
cmake --build "$PACO_BUILD_DIR" --target bench_dipaco_table >&2
if [[ -z "${PACO_KEEP_OPENBLAS_CORETYPE:-}" ]] && grep -q avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SKYLAKEX
fi
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
exec "$PACO_BUILD_DIR/bench/dipaco_table/bench_dipaco_table" "$@"
