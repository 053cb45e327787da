#!/usr/bin/env bash
# about: kill -9 of workers, the store, the launcher, two partners: runs finish, nothing lost
# Invoked by `bench/run chaos [--trials N] [--kinds worker,store,launcher,two_workers]`
# (PACO_ROOT, PACO_BUILD_DIR set, cmake configured). Default: 20 trials per kind.
# Last line: one JSON object.
set -euo pipefail
cmake --build "$PACO_BUILD_DIR" --target bench_chaos paco_train >&2
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)" >&2
exec "$PACO_BUILD_DIR/bench/chaos/bench_chaos" --trials 20 "$@"
