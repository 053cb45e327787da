#!/usr/bin/env bash
# about: the DiPaCo table on a multi-domain corpus (Brown prose, Python, C headers, manual pages) where routing has something to find
set -euo pipefail
bash "$PACO_ROOT/scripts/mix_corpus.sh" >&2
cmake --build "$PACO_BUILD_DIR" --target bench_dipaco_table >&2
if [[ -z "${PACO_KEEP_OPENBLAS_CORETYPE:-}" ]] && grep -q avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SKYLAKEX
fi
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
mix="${PACO_MIX_DIR:-${PACO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/paco}/mix-1}"
exec "$PACO_BUILD_DIR/bench/dipaco_table/bench_dipaco_table" --bench dipaco_mix --corpus files \
  --data "$mix" "$@"
