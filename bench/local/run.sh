#!/usr/bin/env bash
# about: local losses (Laskin) vs GPipe / 1F1B vs one process through paco_train's pipeline job on Brown, over loopback and shaped links between stages
# Invoked by `bench/run local [--steps 500] [--tput-steps 40] [--rows ...] [--links ...]
# [--eval-tokens 200000] [--keep]` (PACO_ROOT, PACO_BUILD_DIR set, cmake configured).
# LAST line: one JSON object, {"bench":"local","rows":[{"name","link","tokens_per_s","bpb",
# "bytes_between_stages"},..],...}.
set -euo pipefail
: "${PACO_ROOT:?run through bench/run}" "${PACO_BUILD_DIR:?run through bench/run}"
cmake --build "$PACO_BUILD_DIR" --target bench_local paco_train >&2
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cpus" >&2
export PACO_TOKEN="${PACO_TOKEN:-bench-local}"
exec "$PACO_BUILD_DIR/bench/local/bench_local" "$@"
