#!/usr/bin/env bash
# test_mpi.sh MPIRUN BINARY: under mpirun (--transport mpi) a failed sync ends the whole job.
# 1. Rank 1 stops itself (SIGSTOP) before its first round and never resumes: rank 0's sync
#    fails at --deadline (3 s), it prints the error and aborts the job (MPI_Abort), and mpirun
#    returns non-zero within seconds instead of waiting for the stopped rank forever.
# 2. Two ranks started with different --compress (mpirun's MPMD form) both refuse, the flag
#    named, and the job ends non-zero.
set -euo pipefail
mpirun="$1"
bin="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2054  # "tcp,self" is one argument
mpi=("$mpirun" --allow-run-as-root --oversubscribe --mca btl tcp,self)
small=(--transport mpi --sync blocking --rounds 3 --inner 6 --d 32 --ctx 32 --layers 2 --heads 2
  --batch 4)

start=$SECONDS
st=0
timeout 120 "${mpi[@]}" -np 2 "$bin" "${small[@]}" --compress int8 --deadline 3 \
  --test-stop-rank 1 >"$tmp/stop" 2>&1 || st=$?
took=$((SECONDS - start))
if [[ $st -eq 0 || $st -eq 124 || $took -ge 60 ]] ||
  ! grep -q "rank 0: .*deadline exceeded" "$tmp/stop"; then
  echo "FAIL (stopped rank): mpirun exited with $st after $took s:" >&2
  cat "$tmp/stop" >&2
  exit 1
fi
echo "ok: rank 1 stopped: the job ended in $took s (exit $st): $(grep -m1 'rank 0: ' "$tmp/stop")"

start=$SECONDS
st=0
timeout 120 "${mpi[@]}" -np 1 "$bin" "${small[@]}" --compress bf16 : \
  -np 1 "$bin" "${small[@]}" --compress int8 >"$tmp/differ" 2>&1 || st=$?
took=$((SECONDS - start))
if [[ $st -eq 0 || $st -eq 124 || $took -ge 60 ]] ||
  ! grep -q "rank 1's --compress is int8 but rank 0's is bf16" "$tmp/differ"; then
  echo "FAIL (different --compress): mpirun exited with $st after $took s:" >&2
  cat "$tmp/differ" >&2
  exit 1
fi
echo "ok: different --compress refused in $took s: $(grep -m1 "rank 1's --compress" "$tmp/differ")"
