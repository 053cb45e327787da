#!/usr/bin/env bash
# ctest example_three_levels_job: the example's whole run, configured from its command line with
# no recompiling (job::run_main: -c, --set, --help), checked from its output and files:
#   - --help lists every setting with the program's own value (dipaco.rounds = 4); a bad value
#     and a mistyped key in the -c file are refused (exit 2) with the setting named;
#   - a run with -c FILE (dipaco.rounds = 3 there, the program says 4) and --set exits 0 and
#     prints the results table: a row per path (5), a finite bits/byte below 8 (a byte costs 8
#     bits unmodelled) for all routed documents;
#   - each of the 5 workers logged rounds 0 … 2 (the file's 3 rounds reached every process);
#   - the store closed every module's last round with all its pushes: 5 for the shared levels'
#     modules 0 and 6, 1 for each expert of level 1 (modules 1 … 5);
#   - run again without --resume or --fresh it refuses (exit 2) to touch the finished run;
#   - --export and --results need only the run directory (the run recorded its -c and --set);
#   - with MPIRUN: the same program launched by mpirun (launch.mode = mpi set on the command
#     line, metrics on), rank 0 alone reading the -c file, ends with the table.
#   check.sh path/to/example_three_levels_job [MPIRUN]
set -uo pipefail
exe=$1 mpirun=${2:-}
[[ "$mpirun" == *NOTFOUND ]] && mpirun=""
dir=$(mktemp -d /tmp/paco_three_levels_job.XXXXXX)
trap 'rm -rf "$dir" "$dir.export" "$dir.mpi" "$dir.toml"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

help=$("$exe" --help) || fail "--help exited $?"
grep -q '^  dipaco.rounds = 4$' <<<"$help" || fail "--help lists no 'dipaco.rounds = 4': $help"
grep -q -- '--set' <<<"$help" || fail "--help names no --set"
bad=$("$exe" --run-dir "$dir" --set dipaco.rounds=0 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -q 'dipaco.rounds must be ≥ 1' <<<"$bad" ||
  fail "--set dipaco.rounds=0 exited $rc: $bad"
printf '[dipaco]\nrouns = 3\n' >"$dir.toml"
bad=$("$exe" --run-dir "$dir" -c "$dir.toml" 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -q "unknown setting 'dipaco.rouns' (did you mean 'dipaco.rounds'?)" <<<"$bad" ||
  fail "a mistyped key exited $rc: $bad"

printf '[dipaco]\nrounds = 3\n' >"$dir.toml"
out=$("$exe" -c "$dir.toml" --set train.seed=2 --run-dir "$dir" --fresh 2>&1)
rc=$?
echo "$out"
[ "$rc" = 0 ] || fail "the launcher exited $rc"
[ "$(grep -c '^| (0,[0-4],0) ' <<<"$out")" = 5 ] || fail "the table has not 5 path rows"
bpb=$(grep '^| all (routed)' <<<"$out" | awk -F'|' '{gsub(/ /, "", $4); print $4}')
awk -v b="$bpb" 'BEGIN { exit !(b + 0 == b && b > 0 && b < 8) }' ||
  fail "all (routed) bits/byte '$bpb' is not a number in (0, 8)"
for w in 1 2 3 4 5; do
  f="$dir/worker-$w.jsonl"
  [ -f "$f" ] || fail "no log $f"
  rounds=$(grep -o '"round":[0-9]*' "$f" | cut -d: -f2 | tr '\n' ' ')
  [ "$rounds" = "0 1 2 " ] || fail "worker $w logged rounds '$rounds', not 0 1 2"
done
for m in 0 1 2 3 4 5 6; do
  want=1
  if [ "$m" = 0 ] || [ "$m" = 6 ]; then want=5; fi
  grep -q "module $m round 2 closed with $want/$want pushes" "$dir/store.log" ||
    fail "module $m's last round did not close with its $want pushes"
done
again=$("$exe" -c "$dir.toml" --set train.seed=2 --run-dir "$dir" 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -q "holds a previous run" <<<"$again" ||
  fail "a second run on the finished directory exited $rc: $again"
"$exe" --run-dir "$dir" --export "$dir.export" || fail "--export exited $?"
for f in base path-0-0-0 path-0-1-0 path-0-2-0 path-0-3-0 path-0-4-0; do
  [ -s "$dir.export/$f.safetensors" ] || fail "--export wrote no $f.safetensors"
done
table=$("$exe" --run-dir "$dir" --results 2>&1) || fail "--results exited $?: $table"
[ "$(grep '^| all (routed)' <<<"$table")" = "$(grep '^| all (routed)' <<<"$out")" ] ||
  fail "--results printed another table: $table"
echo "PASS: store + 5 workers, 3 rounds from -c, 7 modules closed at the last round, all (routed)" \
  "$bpb bits/byte; refused a bad value, a mistyped key and a second run; exported 6 models and" \
  "rebuilt the table from the run directory"

[ -n "$mpirun" ] || exit 0
# A block of 16 ports none of which is taken now: the store's links (base … base + 4), the
# ranks' meeting (base + 7), metrics (base + 8 … base + 13).
base=$(python3 "$(dirname "$0")/../../tests/support/free_port_block.py" 16)
[ -n "$base" ] || fail "no free block of ports"
export PACO_TOKEN=three-levels-job-test PACO_COORDINATOR=127.0.0.1:$((base + 7))
mpi=(-c "$dir.toml" --set dipaco.rounds=2 --set launch.mode=mpi --set launch.base_port=$base
     --set launch.metrics_port=$((base + 8)) --set output.dir="$dir.mpi")
out=$("$mpirun" --allow-run-as-root --oversubscribe --mca btl tcp,self -x PACO_TOKEN \
  -x PACO_COORDINATOR -np 1 "$exe" "${mpi[@]}" : \
  -np 5 "$exe" -c "$dir.no-such.toml" --set launch.mode=mpi 2>&1)
rc=$?
echo "$out"
[ "$rc" = 0 ] || fail "the mpirun launch exited $rc"
grep -q "^store: metrics on http://[^ ]*:$((base + 8))/metrics" <<<"$out" ||
  fail "the store served no metrics on launch.metrics_port"
[ "$(grep -c '^| (0,[0-4],0) ' <<<"$out")" = 5 ] || fail "the mpirun launch's table has not 5 rows"
echo "PASS: the mpirun launch (6 ranks, -c on rank 0 only, --set launch.mode=mpi, metrics on)"
