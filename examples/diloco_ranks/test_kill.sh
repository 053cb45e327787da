#!/usr/bin/env bash
# test_kill.sh BINARY RUN_LOCAL: run_local.sh's ranks do not outlive it and it leaves no log
# directory behind, whether it is sent TERM or KILL in the middle of a long run, or one of its
# ranks stops (SIGSTOP) for good: within a few seconds no rank process is left (running or
# stopped) and its temporary directory (TMPDIR) is empty.
set -euo pipefail
bin="$1"
run_local="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp/tmpdir"
mkdir -p "$TMPDIR"
small=(--sync blocking --d 32 --ctx 32 --layers 2 --heads 2 --batch 4 --compress int8)

# alive PID: the process exists and is not a zombie.
alive() {
  local s
  s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$s" && "$s" != Z ]]
}

# no_ranks_left WHAT PIDS...: every pid gone within 5 s, and TMPDIR empty.
no_ranks_left() {
  local what=$1 p i
  shift
  for ((i = 0; i < 50; i++)); do
    local any=0
    for p in "$@"; do alive "$p" && any=1; done
    [[ $any -eq 0 ]] && break
    sleep 0.1
  done
  for p in "$@"; do
    if alive "$p"; then
      echo "FAIL ($what): rank process $p is still there 5 s later" >&2
      kill -KILL "$@" 2>/dev/null || true
      exit 1
    fi
  done
  if [[ -n "$(ls -A "$TMPDIR")" ]]; then
    echo "FAIL ($what): left behind in TMPDIR: $(ls -A "$TMPDIR")" >&2
    exit 1
  fi
}

# The script's ranks (its children running BINARY), once there are two, or fail after 60 s.
ranks_of() {
  local script=$1 i pids
  for ((i = 0; i < 600; i++)); do
    pids=$(pgrep -P "$script" -f -- "$bin" || true)
    if [[ $(echo "$pids" | grep -c .) -eq 2 ]]; then
      echo "$pids"
      return
    fi
    sleep 0.1
  done
  echo "FAIL: run_local.sh did not start two ranks" >&2
  exit 1
}

sigs=(TERM KILL)
if ! command -v setpriv >/dev/null 2>&1; then
  echo "note: no setpriv (util-linux) here: the ranks cannot die with a killed script; SIGKILL skipped"
  sigs=(TERM)
fi
for sig in "${sigs[@]}"; do
  bash "$run_local" "$bin" 2 "${small[@]}" --rounds 100000 --inner 1000 >"$tmp/out" 2>&1 &
  script=$!
  ranks=$(ranks_of "$script")
  sleep 2  # training
  kill -"$sig" "$script"
  st=0
  wait "$script" 2>/dev/null || st=$?
  # shellcheck disable=SC2086
  no_ranks_left "SIG$sig" $ranks
  echo "ok: run_local.sh sent SIG$sig (exit $st): its ranks ${ranks//$'\n'/ } are gone, no log left"
done

# A rank that stops for good: rank 0's sync fails (its heartbeats stop; at the latest at
# --deadline), the stopped rank is killed RUN_LOCAL_GRACE seconds later and the script fails.
start=$SECONDS
RUN_LOCAL_GRACE=2 bash "$run_local" "$bin" 2 "${small[@]}" --rounds 3 --inner 6 \
  --deadline 3 --test-stop-rank 1 >"$tmp/out" 2>&1 &
script=$!
ranks=$(ranks_of "$script")
st=0
wait "$script" 2>/dev/null || st=$?
took=$((SECONDS - start))
if [[ $st -eq 0 || $took -ge 60 ]] || ! grep -q "rank 0 failed" "$tmp/out"; then
  echo "FAIL (stopped rank): run_local.sh exited with $st after $took s:" >&2
  cat "$tmp/out" >&2
  exit 1
fi
# shellcheck disable=SC2086  # one argument per pid
no_ranks_left "stopped rank" $ranks
echo "ok: a stopped rank: run_local.sh failed in $took s and left no rank: $(grep -m1 'rank 0: ' "$tmp/out")"
