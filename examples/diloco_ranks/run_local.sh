#!/usr/bin/env bash
# run_local.sh BINARY K [FLAGS...]: K ranks of example_diloco_ranks on this machine, joined by
# TCP on 127.0.0.1 through the launcher variables (PACO_RANK, PACO_WORLD_SIZE, PACO_COORDINATOR,
# PACO_TOKEN). Prints rank 0's output; fails if a rank fails or, except with --overlap eager
# (whose ranks differ by design), if the ranks' final θ differ.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: run_local.sh BINARY K [FLAGS...]" >&2
  exit 2
fi
bin="$1"; k="$2"; shift 2
if ! [[ "$k" =~ ^[1-9][0-9]*$ ]]; then
  echo "run_local.sh: K must be a positive integer, got '$k'" >&2
  exit 2
fi
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
port=$((20000 + RANDOM % 20000))
pids=()
for ((r = 0; r < k; r++)); do
  PACO_RANK=$r PACO_WORLD_SIZE=$k PACO_COORDINATOR="127.0.0.1:$port" \
    PACO_TOKEN="${PACO_TOKEN:-local-$port}" "$bin" "$@" >"$logs/$r.out" 2>&1 &
  pids+=($!)
done
rc=0
for ((r = 0; r < k; r++)); do
  if ! wait "${pids[$r]}"; then
    echo "run_local.sh: rank $r failed:" >&2
    cat "$logs/$r.out" >&2
    rc=1
  fi
done
grep -v "final theta hash" "$logs/0.out" || true
[[ $rc -eq 0 ]] || exit $rc
hashes=$(cat "$logs"/*.out | sed -n 's/^rank [0-9]* final theta hash //p' | sort -u)
echo "final theta hashes: $(echo "$hashes" | tr '\n' ' ')"
if [[ " $* " != *" eager "* && $(echo "$hashes" | wc -l) -ne 1 ]]; then
  echo "run_local.sh: the ranks' final θ differ" >&2
  exit 1
fi
