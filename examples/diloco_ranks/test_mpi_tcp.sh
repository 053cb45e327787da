#!/usr/bin/env bash
# test_mpi_tcp.sh MPIRUN BINARY RUN_LOCAL [FLAGS...]: every sync rule of the round loop (blocking,
# co2, co2_snapshot, eager, streaming, naive_delayed) ends with the same bits over net::mpi
# (two ranks under mpirun) as over TCP (two ranks through run_local.sh): the transport carries
# the all-reduce's bytes and nothing else — the same seeds, shards, ring order and reduction
# order give the same θ on every rank. (naive_delayed also checks every round that its ranks
# hold the same θ, so a divergence fails its run.) Prints each rule's hashes.
set -euo pipefail
mpirun="$1"
bin="$2"
run_local="$3"
shift 3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2054  # "tcp,self" is one argument
mpi=("$mpirun" --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2)

for rule in blocking co2 co2_snapshot eager streaming naive_delayed; do
  st=0
  timeout 240 "${mpi[@]}" "$bin" --transport mpi --sync "$rule" "$@" >"$tmp/mpi" 2>&1 || st=$?
  if [[ $st -ne 0 ]]; then
    echo "FAIL ($rule): mpirun exited with $st:" >&2
    cat "$tmp/mpi" >&2
    exit 1
  fi
  over_mpi=$(sed -n 's/^rank [0-9]* final theta hash //p' "$tmp/mpi" | sort -u | tr '\n' ' ')
  st=0
  timeout 240 bash "$run_local" "$bin" 2 --sync "$rule" "$@" >"$tmp/tcp" 2>&1 || st=$?
  if [[ $st -ne 0 ]]; then
    echo "FAIL ($rule): run_local.sh exited with $st:" >&2
    cat "$tmp/tcp" >&2
    exit 1
  fi
  over_tcp=$(sed -n 's/^final theta hashes: //p' "$tmp/tcp")
  if [[ -z "$over_mpi" || "$over_mpi" != "$over_tcp" ]]; then
    echo "FAIL ($rule): final θ over MPI [$over_mpi] differs from over TCP [$over_tcp]" >&2
    cat "$tmp/mpi" "$tmp/tcp" >&2
    exit 1
  fi
  echo "ok: $rule: the same final θ over MPI and over TCP: $over_mpi"
done
