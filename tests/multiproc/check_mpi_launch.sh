#!/usr/bin/env bash
# ctest dipaco_mpi_launch: the demo configuration, small, launched by mpirun (launch.mode = mpi:
# rank 0 the store, ranks 1-4 the workers, over the job's TCP links) ends with the same modules,
# bit for bit, as the same run launched by paco_train itself (launch.mode = local): every
# module's hash at its last close, as each store logged it, is the same. Rank 0 alone reads the
# configuration: ranks 1-4 are given a file that does not exist (mpirun's MPMD form) and run on
# what rank 0 sends them. A world of the wrong size stops every rank with an error naming the
# size the job needs; a rank started twice stops every process of the launch, naming it; a store
# rank stopped for several peer timeouts is survived (the workers rejoin in their processes).
#   check_mpi_launch.sh MPIRUN PACO_TRAIN SOURCE_DIR
set -uo pipefail
mpirun=$1 paco_train=$2 src=$3
work=$(mktemp -d /tmp/paco_mpi_launch.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
small=(-c "$src/examples/configs/dipaco_brown.toml" --set model.d=32 --set model.layers=2
       --set model.heads=2 --set model.ctx=64 --set train.batch=4 --set train.threads=1
       --set dipaco.rounds=3 --set dipaco.inner_steps=20 --set dipaco.pretrain_steps=10
       --set train.warmup=2 --set dipaco.reroute_every=0 --set launch.round_timeout_s=60)
export PACO_TOKEN=mpi-launch-test
"$paco_train" "${small[@]}" --set output.dir="$work/local" >"$work/local.out" 2>&1 ||
  { rc=$?; cat "$work/local.out"; fail "the local launch exited $rc"; }
# A block of 8 ports none of which is taken now (tests beside this one draw their own).
base=$(python3 "$(dirname "$0")/../support/free_port_block.py" 8)
[ -n "$base" ] || fail "no free block of ports"
# The ranks meet at base + 7 (PACO_COORDINATOR); the store serves on base + 0 … base + 4.
export PACO_COORDINATOR=127.0.0.1:$((base + 7))
mpi=("$mpirun" --allow-run-as-root --oversubscribe --mca btl tcp,self -x PACO_TOKEN
     -x PACO_COORDINATOR)
"${mpi[@]}" -np 1 "$paco_train" "${small[@]}" --set output.dir="$work/mpi" \
  --set launch.mode=mpi --set launch.base_port=$base : \
  -np 4 "$paco_train" -c "$work/no-such-config.toml" --set launch.mode=mpi >"$work/mpi.out" 2>&1 ||
  { rc=$?; cat "$work/mpi.out"; fail "the mpirun launch exited $rc"; }
cat "$work/mpi.out"
grep -q '^| all (routed)' "$work/mpi.out" || fail "rank 0 printed no results table"
grep -q '^module rounds \[[#.]*\] [0-9]*/[0-9]* .*eta [0-9]*:[0-9][0-9]' "$work/mpi.out" ||
  fail "rank 0 showed no progress of the rounds"
# module -> hash at its last close.
last_hashes() {
  grep -o 'module [0-9]* round [0-9]* closed with .*hash [0-9a-f]\{16\}' "$1" |
    awk '{h[$2] = $NF} END {for (m in h) print m, h[m]}' | sort
}
local_h=$(last_hashes "$work/local/store.log")
mpi_h=$(last_hashes "$work/mpi.out")
echo "local: $(tr '\n' ' ' <<<"$local_h")"
echo "mpi:   $(tr '\n' ' ' <<<"$mpi_h")"
[ "$(wc -l <<<"$local_h")" = 4 ] || fail "the local run's store logged $(wc -l <<<"$local_h") modules"
[ "$local_h" = "$mpi_h" ] || fail "the modules differ between the launches"
# The store rank stopped (SIGSTOP) until a worker has lost its link, then continued: the workers
# rejoin in their processes (nothing restarts a rank; one that exits ends the launch), and the
# launch ends with its table.
"${mpi[@]}" -np 1 "$paco_train" "${small[@]}" --set output.dir="$work/stall" \
  --set launch.mode=mpi --set launch.base_port=$base --set launch.peer_timeout_s=1 \
  --set dipaco.inner_steps=100 --set dipaco.rounds=4 : \
  -np 4 "$paco_train" -c "$work/no-such-config.toml" --set launch.mode=mpi >"$work/stall.out" 2>&1 &
launch=$!
for _ in $(seq 600); do [ -e "$work/stall/worker-1.jsonl" ] && break; sleep 0.2; done
store=$(pgrep -f "output.dir=$work/stall" | while read -r p; do
  [ "$(cat /proc/$p/comm 2>/dev/null)" = paco_train ] && echo "$p"; done | head -n 1)
[ -n "$store" ] || { kill $launch; cat "$work/stall.out"; fail "no store rank to stop"; }
kill -STOP "$store"
for _ in $(seq 600); do grep -q 'rejoining from its checkpoint' "$work/stall.out" && break; sleep 0.2; done
sleep 3
kill -CONT "$store"
wait $launch || { rc=$?; cat "$work/stall.out"; fail "the launch with a stalled store exited $rc"; }
grep -q 'rejoining from its checkpoint' "$work/stall.out" ||
  { cat "$work/stall.out"; fail "no worker felt the stall"; }
grep -q '^| all (routed)' "$work/stall.out" ||
  { cat "$work/stall.out"; fail "the launch with a stalled store printed no results table"; }
grep -h 'rejoining from its checkpoint' "$work/stall.out" | head -n 2
# 3 ranks for a job of 1 store + 4 workers: every rank refuses, the launch fails.
"${mpi[@]}" -np 3 "$paco_train" "${small[@]}" --set output.dir="$work/short" \
  --set launch.mode=mpi --set launch.base_port=$base >"$work/short.out" 2>&1 &&
  fail "3 ranks for 5 processes exited 0"
[ "$(grep -c '3 ranks were started, the job needs 5' "$work/short.out")" -ge 1 ] ||
  { cat "$work/short.out"; fail "no rank named the size the job needs"; }
# Rank 1 started twice (paco's own rank variables; ranks 2-4 never come): the three processes
# stop, each naming the rank.
pids=()
for r in 0 1 1; do
  PACO_LAUNCHER=paco PACO_RANK=$r PACO_WORLD_SIZE=5 timeout 60 "$paco_train" "${small[@]}" \
    --set output.dir="$work/twice-$r" --set launch.mode=mpi --set launch.base_port=$base \
    >"$work/twice-${#pids[@]}.out" 2>&1 &
  pids+=($!)
  sleep 0.5
done
for i in 0 1 2; do
  wait "${pids[$i]}" && fail "process $i of the launch with rank 1 twice exited 0"
  grep -q 'rank 1 was started twice (from 127.0.0.1:' "$work/twice-$i.out" ||
    { cat "$work/twice-$i.out"; fail "process $i did not name the rank started twice"; }
done
grep -h 'ranks were started' "$work/short.out" | head -n 2
grep -h 'started twice' "$work"/twice-*.out
echo "PASS: mpirun -np 5 gives the local launch's modules, bit for bit, survives a stalled store, with the configuration"
echo "      read by rank 0 alone; -np 3 is refused with rank 0's reason; a rank started twice"
echo "      stops every process, each naming it"
