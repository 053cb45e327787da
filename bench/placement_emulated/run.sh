#!/usr/bin/env bash
# about: DT-FM placements (GCMA, rank order, random) executed on emulated links vs the cost model
# Invoked by `bench/run placement_emulated` (PACO_ROOT, PACO_BUILD_DIR set, cmake configured).
# Options: --scenarios world8,regional8 --random 10 --iterations 5 --modes as_modelled,native
# Last line: one JSON object.
set -euo pipefail
cmake --build "$PACO_BUILD_DIR" --target bench_placement_emulated paco_emulate >&2
exec "$PACO_BUILD_DIR/bench/placement_emulated/bench_placement_emulated" "$@"
