#!/usr/bin/env bash
# about: DT-FM GCMA vs random and rank-order baselines on the five scenarios
# Invoked by `bench/run schedule` (PACO_ROOT, PACO_BUILD_DIR set, cmake configured).
# Single-threaded; pinned to one core when taskset is available. Last line: one JSON object.
set -euo pipefail
cmake --build "$PACO_BUILD_DIR" --target bench_schedule >&2
bin="$PACO_BUILD_DIR/bench/schedule/bench_schedule"
if command -v taskset >/dev/null 2>&1; then
  exec taskset -c 0 "$bin" "$@"
fi
exec "$bin" "$@"
