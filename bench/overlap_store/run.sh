#!/usr/bin/env bash
# about: blocking vs co2, eager and the naive delayed rule through the module store (DiPaCo 2x2, DiLoCo k=4) over shaped TCP
# Invoked by `bench/run overlap_store [--rounds R] [--inner H] [--many-rounds R] [--many-inner H]
# [--comm-ratio C] [--trainers dipaco,diloco] [--keep]` (PACO_ROOT, PACO_BUILD_DIR set, cmake
# configured). Last line: one JSON object.
set -euo pipefail
cmake --build "$PACO_BUILD_DIR" --target bench_overlap_store paco_train >&2
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cpus" >&2
export PACO_TOKEN="${PACO_TOKEN:-bench-overlap-store}"
exec "$PACO_BUILD_DIR/bench/overlap_store/bench_overlap_store" "$@"
