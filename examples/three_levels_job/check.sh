#!/usr/bin/env bash
# ctest example_three_levels_job: the example's whole run in a fresh run directory, checked from
# its output and files:
#   - the launcher exits 0 and prints the results table: a row per path (5), and a finite
#     bits/byte below 8 (a byte costs 8 bits unmodelled) for all routed documents;
#   - each of the 5 workers logged rounds 0 … 3;
#   - the store closed every module's last round with all its pushes: 5 for the shared levels'
#     modules 0 and 6, 1 for each expert of level 1 (modules 1 … 5);
#   - run again without --resume or --fresh it refuses (exit 2) to touch the finished run;
#   - --export writes the base model and the 5 paths.
#   check.sh path/to/example_three_levels_job
set -uo pipefail
exe=$1
dir=$(mktemp -d /tmp/paco_three_levels_job.XXXXXX)
trap 'rm -rf "$dir" "$dir.export"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
out=$("$exe" --run-dir "$dir" --fresh 2>&1)
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
  [ "$rounds" = "0 1 2 3 " ] || fail "worker $w logged rounds '$rounds', not 0 1 2 3"
done
for m in 0 1 2 3 4 5 6; do
  want=1
  if [ "$m" = 0 ] || [ "$m" = 6 ]; then want=5; fi
  grep -q "module $m round 3 closed with $want/$want pushes" "$dir/store.log" ||
    fail "module $m's last round did not close with its $want pushes"
done
again=$("$exe" --run-dir "$dir" 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -q "holds a previous run" <<<"$again" ||
  fail "a second run on the finished directory exited $rc: $again"
"$exe" --run-dir "$dir" --export "$dir.export" || fail "--export exited $?"
for f in base path-0-0-0 path-0-1-0 path-0-2-0 path-0-3-0 path-0-4-0; do
  [ -s "$dir.export/$f.safetensors" ] || fail "--export wrote no $f.safetensors"
done
echo "PASS: store + 5 workers, 4 rounds, 7 modules closed at the last round, all (routed) $bpb bits/byte; refused a second run; exported 6 models"
