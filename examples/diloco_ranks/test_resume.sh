#!/usr/bin/env bash
# test_resume.sh BINARY RUN_LOCAL: the known answer of --checkpoint-dir / --resume. Two ranks
# (int8 with error feedback, outer Nesterov) run R rounds uninterrupted; then the same run
# with --checkpoint-dir is killed (every rank SIGKILLs itself after writing round K) and
# resumed with --resume: its final θ must be bit-identical (the same hash). Also: --resume
# with no checkpoint, and a fresh run over existing checkpoints, fail naming the file; a mode
# whose round boundary cannot be captured (--sync streaming) is refused, the reason given.
set -euo pipefail
bin="$1"
run_local="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
flags=(--sync blocking --rounds 4 --inner 6 --d 32 --ctx 32 --layers 2 --heads 2 --batch 4
  --compress int8)
refused() { [[ $st -ne 0 ]] && grep -q "$2" "$1"; }  # refused FILE PATTERN: exit ≠ 0, said why
hash_of() { sed -n 's/^final theta hashes: //p' "$1" | tr -d ' '; }
fail() {
  echo "FAIL: $1" >&2
  [[ -z "${2:-}" ]] || cat "$2" >&2
  exit 1
}

bash "$run_local" "$bin" 2 "${flags[@]}" >"$tmp/whole" 2>&1 || fail "the uninterrupted run" "$tmp/whole"
whole=$(hash_of "$tmp/whole")
[[ -n "$whole" ]] || fail "no hash" "$tmp/whole"

ck="$tmp/ck"
st=0
bash "$run_local" "$bin" 2 "${flags[@]}" --checkpoint-dir "$ck" --test-crash-after 2 \
  >"$tmp/killed" 2>&1 || st=$?
[[ $st -ne 0 ]] || fail "the run killed after round 2 exited 0" "$tmp/killed"
ls "$ck"/rank-0.round-*.safetensors "$ck"/rank-1.round-*.safetensors >/dev/null ||
  fail "no checkpoints: $(ls "$ck")" "$tmp/killed"
bash "$run_local" "$bin" 2 "${flags[@]}" --checkpoint-dir "$ck" --resume >"$tmp/resumed" 2>&1 ||
  fail "the resumed run" "$tmp/resumed"
grep -q "^resumed from .* after round [12]$" "$tmp/resumed" || fail "no resume" "$tmp/resumed"
resumed=$(hash_of "$tmp/resumed")
[[ "$resumed" == "$whole" ]] || fail "resumed θ $resumed differs from the uninterrupted $whole"
echo "ok: killed after round 2 and resumed ($(grep '^resumed from' "$tmp/resumed")): θ $resumed, bit-identical to the uninterrupted run"

# A fresh run over the checkpoints, and a resume without any, are refused naming the file.
st=0
bash "$run_local" "$bin" 2 "${flags[@]}" --checkpoint-dir "$ck" >"$tmp/fresh" 2>&1 || st=$?
refused "$tmp/fresh" "checkpoint '$ck/rank-0.round-3.safetensors' exists" ||
  fail "a fresh run over existing checkpoints was not refused" "$tmp/fresh"
st=0
bash "$run_local" "$bin" 2 "${flags[@]}" --checkpoint-dir "$tmp/none" --resume >"$tmp/none.out" 2>&1 ||
  st=$?
refused "$tmp/none.out" "no checkpoint of rank 0 in '$tmp/none'" ||
  fail "a resume without checkpoints was not refused" "$tmp/none.out"
st=0
"$bin" --rank 0 --size 1 --sync streaming --checkpoint-dir "$ck" >"$tmp/streaming" 2>&1 || st=$?
refused "$tmp/streaming" "checkpoint-dir works with --sync blocking only" ||
  fail "--sync streaming with --checkpoint-dir was not refused" "$tmp/streaming"
echo "ok: refused: $(grep -o "checkpoint '.*' exists" "$tmp/fresh" | head -1); $(grep -o "no checkpoint of rank 0 in '[^']*'" "$tmp/none.out" | head -1); streaming"
