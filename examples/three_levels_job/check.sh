#!/usr/bin/env bash
# ctest example_three_levels_job: the example's whole run in a fresh run directory, checked from
# its files: the launcher exited 0 and printed the results table with a row per path; the store's
# log closed every module's last round; each of the 5 workers logged rounds 0 … 3.
#   check.sh path/to/example_three_levels_job
set -euo pipefail
exe=$1
dir=$(mktemp -d /tmp/paco_three_levels_job.XXXXXX)
trap 'rm -rf "$dir"' EXIT
out=$("$exe" --run-dir "$dir" --fresh 2>&1) || { echo "$out"; echo "FAIL: exit $?"; exit 1; }
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
grep -q "^| all (routed)" <<<"$out" || fail "no results table"
[ "$(grep -c '^| (0,[0-4],0) ' <<<"$out")" = 5 ] || fail "the table has not 5 path rows"
for w in 1 2 3 4 5; do
  f="$dir/worker-$w.jsonl"
  [ -f "$f" ] || fail "no log $f"
  rounds=$(grep -o '"round":[0-9]*' "$f" | cut -d: -f2 | tr '\n' ' ')
  [ "$rounds" = "0 1 2 3 " ] || fail "worker $w logged rounds '$rounds', not 0 1 2 3"
done
# 7 modules, each closed at rounds 0 … 3 (the store numbers a round's close by the round).
for m in 0 1 2 3 4 5 6; do
  grep -q "module $m round 3 closed with 1/1 pushes\|module $m round 3 closed with 5/5 pushes" \
    "$dir/store.log" || fail "module $m's last round did not close with all its pushes"
done
echo "PASS: store + 5 workers, 4 rounds, 7 modules closed at the last round"
