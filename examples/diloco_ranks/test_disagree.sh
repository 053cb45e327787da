#!/usr/bin/env bash
# test_disagree.sh BINARY: two ranks started with different flags must both stop, non-zero,
# within seconds (far below --deadline, 600 s by default), each naming the flag and both
# values — first --compress (whose codecs would otherwise wait on each other's messages until
# the deadline), then --inner (which would otherwise go unnoticed), then --streams (refused by the
# transport's handshake). Each rank says which launch variables gave it its rank. Also: a non-finite --lr or --alpha is refused, the flag named,
# and --sync co2_snapshot with --tau 0.
set -euo pipefail
bin="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
model=(--rounds 3 --d 32 --ctx 32 --layers 2 --heads 2 --batch 4)

# case NAME V0 V1 FIXED...: rank 0 gets "NAME V0", rank 1 "NAME V1", both the FIXED flags.
case_of() {
  local name=$1 v0=$2 v1=$3
  shift 3
  local port=$((20000 + RANDOM % 20000)) start=$SECONDS pids=() r st
  for r in 0 1; do
    local v=$v0
    [[ $r -eq 1 ]] && v=$v1
    PACO_RANK=$r PACO_WORLD_SIZE=2 PACO_COORDINATOR="127.0.0.1:$port" PACO_TOKEN="t-$port" \
      timeout 120 "$bin" "${model[@]}" "$@" "$name" "$v" >"$tmp/$r.out" 2>&1 &
    pids+=($!)
  done
  local want="rank 1's $name is $v1 but rank 0's is $v0"
  for r in 0 1; do
    st=0
    wait "${pids[$r]}" || st=$?
    if [[ $st -eq 0 || $st -eq 124 ]]; then
      echo "FAIL ($name): rank $r exited with $st (expected a refusal):" >&2
      cat "$tmp/$r.out" >&2
      exit 1
    fi
    if ! grep -qF "$want" "$tmp/$r.out"; then
      echo "FAIL ($name): rank $r does not say \"$want\":" >&2
      cat "$tmp/$r.out" >&2
      exit 1
    fi
  done
  grep -q "^rank 1 of 2 from PACO_RANK/PACO_WORLD_SIZE" "$tmp/1.out" ||
    { echo "FAIL ($name): rank 1 does not say where its rank came from" >&2; exit 1; }
  local took=$((SECONDS - start))
  if [[ $took -ge 60 ]]; then
    echo "FAIL ($name): the refusal took $took s" >&2
    exit 1
  fi
  echo "ok: $name $v0 vs $v1 refused on both ranks in $took s: $(grep -F "$want" "$tmp/0.out")"
}

case_of --compress bf16 int8 --inner 6
case_of --inner 6 7 --compress int8

# --streams: the transport refuses the link at its handshake (it used to wait out its 20 s
# connect deadline), each rank naming both counts.
port=$((20000 + RANDOM % 20000)) start=$SECONDS pids=()
for r in 0 1; do
  PACO_RANK=$r PACO_WORLD_SIZE=2 PACO_COORDINATOR="127.0.0.1:$port" PACO_TOKEN="t-$port" \
    timeout 120 "$bin" "${model[@]}" --streams $((r + 1)) >"$tmp/$r.out" 2>&1 &
  pids+=($!)
done
for r in 0 1; do
  st=0
  wait "${pids[$r]}" || st=$?
  want="$((2 - r)) stream(s) per link) differs from ours (size 2, epoch 0, $((r + 1)))"
  if [[ $st -eq 0 || $st -eq 124 ]] || ! grep -qF "$want" "$tmp/$r.out"; then
    echo "FAIL (--streams): rank $r exited with $st, expected a refusal saying \"$want\":" >&2
    cat "$tmp/$r.out" >&2
    exit 1
  fi
done
took=$((SECONDS - start))
if [[ $took -ge 10 ]]; then
  echo "FAIL (--streams): the refusal took $took s" >&2
  exit 1
fi
echo "ok: --streams 1 vs 2 refused on both ranks in $took s: $(grep -F "differs" "$tmp/0.out")"

for bad in "--lr nan" "--lr inf" "--alpha nan" "--alpha -inf"; do
  flag=${bad% *}
  st=0
  # shellcheck disable=SC2086
  "$bin" --rank 0 --size 1 "${model[@]}" $bad >"$tmp/bad.out" 2>&1 || st=$?
  if [[ $st -eq 0 ]] || ! grep -q "^example_diloco_ranks: $flag must be a finite number" "$tmp/bad.out"; then
    echo "FAIL: $bad was not refused (exit $st):" >&2
    cat "$tmp/bad.out" >&2
    exit 1
  fi
done
echo "ok: non-finite --lr and --alpha refused: $(cat "$tmp/bad.out")"

# --sync co2_snapshot needs τ ≥ 1 steps before its write-back: --tau 0 is refused, not run as 1.
st=0
"$bin" --rank 0 --size 1 "${model[@]}" --sync co2_snapshot --tau 0 >"$tmp/tau.out" 2>&1 || st=$?
if [[ $st -eq 0 ]] || ! grep -q "^example_diloco_ranks: --tau must be ≥ 1 with --sync co2_snapshot" "$tmp/tau.out"; then
  echo "FAIL: --sync co2_snapshot --tau 0 was not refused (exit $st):" >&2
  cat "$tmp/tau.out" >&2
  exit 1
fi
echo "ok: --sync co2_snapshot --tau 0 refused: $(cat "$tmp/tau.out")"
