#!/usr/bin/env bash
# about: every sync rule (blocking, co2, eager, streaming, naive delayed; two outer steps; a throttled worker) through paco_train's store over shaped TCP, DiPaCo 2x2 and DiLoCo P=4
# Invoked by `bench/run overlap [--rounds 12] [--inner 40] [--many-rounds 120] [--many-inner 4]
# [--comm-ratio 0.5] [--trainers dipaco,diloco] [--regimes few,many] [--rows ...] [--keep]`
# (PACO_ROOT, PACO_BUILD_DIR set, cmake configured). LAST line: one JSON object,
# {"bench":"overlap","rows":[{"trainer","regime","name","wall_ratio","bpb","bytes","peak_Bps",
#  "dp_bytes_ratio",...},..],...}.
set -euo pipefail
: "${PACO_ROOT:?run through bench/run}" "${PACO_BUILD_DIR:?run through bench/run}"
cmake --build "$PACO_BUILD_DIR" --target bench_overlap paco_train >&2
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cpus" >&2
export PACO_TOKEN="${PACO_TOKEN:-bench-overlap}"
exec "$PACO_BUILD_DIR/bench/overlap/bench_overlap" "$@"
