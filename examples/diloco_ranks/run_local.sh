#!/usr/bin/env bash
# run_local.sh BINARY K [FLAGS...]: K ranks of example_diloco_ranks on this machine, joined by
# TCP on 127.0.0.1 through the launcher variables (PACO_RANK, PACO_WORLD_SIZE, PACO_COORDINATOR,
# PACO_TOKEN). Prints rank 0's output; fails if a rank fails or, except with --sync co2 or
# eager (whose ranks differ by design), if the ranks' final θ differ.
#
# The ranks do not outlive the script. When it exits or is sent INT, TERM or HUP, it kills
# them; when it is killed outright (KILL), the kernel kills them (each starts under `setpriv
# --pdeathsig KILL`, where util-linux has it); when a rank fails, the others get
# RUN_LOCAL_GRACE seconds (default 5) to end on their own, then are killed, so that a hung or
# stopped rank cannot hang the script; and once a rank has finished, the others get
# RUN_LOCAL_FINISH seconds (default 300: rank 0 still evaluates) before they are killed and the
# run fails — a rank stopped after the last sync, which no peer waits for, ends the run too. Their logs leave nothing on disk: each rank writes to a
# file deleted as soon as the script opened it, read back at the end through /proc/$$/fd.
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
grace="${RUN_LOCAL_GRACE:-5}"
finish="${RUN_LOCAL_FINISH:-300}"

declare -A rank_of=()  # pid -> rank, for the ranks not yet reaped
logs=""
stop_ranks() {
  local p
  for p in "${!rank_of[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  [[ -z "$logs" ]] || rm -rf "$logs"
}
trap stop_ranks EXIT
trap 'stop_ranks; trap - EXIT; exit 130' INT
trap 'stop_ranks; trap - EXIT; exit 143' TERM
trap 'stop_ranks; trap - EXIT; exit 129' HUP

# One log per rank, on a descriptor of this script; the directory is gone before a rank starts.
logs="$(mktemp -d)"
fds=()
for ((r = 0; r < k; r++)); do
  exec {fd}>"$logs/$r.out"
  fds+=("$fd")
done
rm -rf "$logs"
log_of() { cat "/proc/$$/fd/${fds[$1]}"; }

pdeath=()
if command -v setpriv >/dev/null 2>&1 && setpriv --pdeathsig KILL -- true 2>/dev/null; then
  pdeath=(setpriv --pdeathsig KILL --)
fi
port=$((20000 + RANDOM % 20000))
for ((r = 0; r < k; r++)); do
  PACO_RANK=$r PACO_WORLD_SIZE=$k PACO_COORDINATOR="127.0.0.1:$port" \
    PACO_TOKEN="${PACO_TOKEN:-local-$port}" "${pdeath[@]}" "$bin" "$@" >&"${fds[$r]}" 2>&1 &
  rank_of[$!]=$r
done

# running PID: the rank is this script's child and has not exited (not a zombie).
running() {
  local stat f
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  read -ra f <<<"${stat##*) }"  # STATE PPID … after "PID (comm) "
  [[ "${f[0]}" != Z && "${f[1]}" == "$$" ]]
}
rc=0
kill_at=-1
finish_at=-1
while ((${#rank_of[@]} > 0)); do
  for p in "${!rank_of[@]}"; do
    running "$p" && continue
    st=0
    wait "$p" 2>/dev/null || st=$?  # its status (2>/dev/null: no "Killed" notice)
    r=${rank_of[$p]}
    unset "rank_of[$p]"
    if ((st != 0)); then
      echo "run_local.sh: rank $r failed (exit $st):" >&2
      log_of "$r" >&2
      rc=1
      ((kill_at >= 0)) || kill_at=$((SECONDS + grace))
    fi
    ((finish_at >= 0)) || finish_at=$((SECONDS + finish))
  done
  if ((kill_at >= 0 && SECONDS >= kill_at && ${#rank_of[@]} > 0)); then
    echo "run_local.sh: stopping the ranks still running ${grace} s after a rank failed" >&2
    for p in "${!rank_of[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  fi
  if ((finish_at >= 0 && SECONDS >= finish_at && ${#rank_of[@]} > 0 && kill_at < 0)); then
    echo "run_local.sh: ranks ${rank_of[*]} did not finish ${finish} s after another did (hung" \
      "or stopped); stopping them" >&2
    for p in "${!rank_of[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rc=1
    kill_at=$SECONDS
  fi
  ((${#rank_of[@]} == 0)) || sleep 0.2
done
log_of 0 | grep -v "final theta hash" || true
[[ $rc -eq 0 ]] || exit $rc
hashes=$(for ((r = 0; r < k; r++)); do log_of "$r"; done |
  sed -n 's/^rank [0-9]* final theta hash //p' | sort -u)
echo "final theta hashes: $(echo "$hashes" | tr '\n' ' ')"
if [[ " $* " != *" eager "* && " $* " != *" co2 "* && $(echo "$hashes" | wc -l) -ne 1 ]]; then
  echo "run_local.sh: the ranks' final θ differ" >&2
  exit 1
fi
