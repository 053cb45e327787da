#!/usr/bin/env bash
# about: one DiPaCo worker throttled 4x: the others' throughput blocking, with a train budget,
# with rounds closing on a quorum and late work merged, paced by the store's measured push pace
# Invoked by `bench/run straggler [--rounds R] [--factor F] [--budget B] [--diloco] [--rows a,b]` (PACO_ROOT,
# PACO_BUILD_DIR set, cmake configured). Last line: one JSON object.
set -euo pipefail
cmake --build "$PACO_BUILD_DIR" --target bench_straggler paco_train >&2
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)" >&2
exec "$PACO_BUILD_DIR/bench/straggler/bench_straggler" "$@"
