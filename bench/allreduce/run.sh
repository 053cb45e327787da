#!/usr/bin/env bash
# about: ring all-reduce over asio_tcp and mpi vs a raw TCP ring and Open MPI MPI_Allreduce
# bench/run allreduce [MAX_BYTES] [ROUNDS]
# 4 processes on 127.0.0.1, float32 all-reduce 4 KiB .. 64 MiB. Per size: algbw, busbw
# (2(p-1)/p * bytes / p50), p50 and p99 of the per-call time, cpu_ms (p50 of the CPU time rank
# 0's process, all threads, spent per call; steadier than wall time on a loaded machine). Peers
# measured in the same run:
# raw_ring (the same processes moving the same bytes in the same pipelined ring pattern over
# plain blocking TCP sockets: no framing, no checksum, no reduction) and ompi_allreduce
# (MPI_Allreduce forced onto TCP with --mca btl tcp,self). raw_ring and asio_tcp run ROUNDS
# times interleaved; for both, the best round per size is kept. LAST line: one JSON object.
set -euo pipefail
: "${PACO_ROOT:?run through bench/run}" "${PACO_BUILD_DIR:?run through bench/run}"
max_bytes="${1:-67108864}"
rounds="${2:-2}"
p=4
targets=(bench_allreduce)
have_mpi=0
if command -v mpirun >/dev/null && ! grep -q "PACO_WITH_MPI:BOOL=ON" "$PACO_BUILD_DIR/CMakeCache.txt"; then
  echo "[allreduce] enabling PACO_WITH_MPI in $PACO_BUILD_DIR for the mpi / MPI_Allreduce rows" >&2
  cmake -S "$PACO_ROOT" -B "$PACO_BUILD_DIR" -DPACO_WITH_MPI=ON >/dev/null
fi
if command -v mpirun >/dev/null && grep -q "PACO_WITH_MPI:BOOL=ON" "$PACO_BUILD_DIR/CMakeCache.txt"; then
  targets+=(bench_allreduce_mpi)
  have_mpi=1
fi
cmake --build "$PACO_BUILD_DIR" --target "${targets[@]}" >&2
bin="$PACO_BUILD_DIR/bench/allreduce"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run_group() {  # mode round
  local mode=$1 round=$2 port=$((20000 + RANDOM % 30000)) pids=()
  for ((r = 1; r < p; r++)); do
    timeout 600 "$bin/bench_allreduce" "$mode" "$r" "$p" "$port" "$max_bytes" >/dev/null &
    pids+=($!)
  done
  timeout 600 "$bin/bench_allreduce" "$mode" 0 "$p" "$port" "$max_bytes" | tee -a "$out/rows.jsonl"
  for pid in "${pids[@]}"; do wait "$pid"; done
}

echo "machine: $(nproc) cpus, $(uname -r); loopback; p=$p; max_bytes=$max_bytes; rounds=$rounds"
for ((k = 0; k < rounds; k++)); do
  run_group raw "$k"
  run_group asio "$k"
done
if ((have_mpi)); then
  timeout 900 mpirun --allow-run-as-root --oversubscribe -np "$p" --mca btl tcp,self \
    "$bin/bench_allreduce_mpi" "$max_bytes" | tee -a "$out/rows.jsonl"
else
  echo "mpi: skipped (configure with -DPACO_WITH_MPI=ON and install openmpi-bin)"
fi

python3 - "$out/rows.jsonl" "$max_bytes" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"bytes"')]
best = {}
for r in rows:
    k = (r["bytes"], r["transport"])
    if k not in best or r["busbw_GBps"] > best[k]["busbw_GBps"]:
        best[k] = r
top = int(sys.argv[2])
def bw(t):
    r = best.get((top, t))
    return r["busbw_GBps"] if r else None
print("%10s %-15s %10s %10s %9s %9s" % ("bytes", "transport", "algbw GB/s", "busbw GB/s", "p50 ms", "p99 ms"))
for k in sorted(best):
    r = best[k]
    print("%10d %-15s %10.3f %10.3f %9.3f %9.3f" % (r["bytes"], r["transport"], r["algbw_GBps"],
          r["busbw_GBps"], r["p50_ms"], r["p99_ms"]))
out = {"bench": "allreduce",
       "rows": [{k: best[x][k] for k in ("bytes", "transport", "busbw_GBps", "p50_ms", "p99_ms")}
                for x in sorted(best)]}
a, raw, ompi = bw("asio_tcp"), bw("raw_ring"), bw("ompi_allreduce")
out["ratio_64MiB"] = round(a / raw, 4) if a and raw else None
out["vs_ompi_64MiB"] = round(a / ompi, 4) if a and ompi else None
print(json.dumps(out, separators=(",", ":")))
PY
