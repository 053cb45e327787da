#!/usr/bin/env bash
# about: host compressor encode/decode throughput vs memcpy (and CUDA kernels vs device copy when a GPU is present)
# Each host codec encodes/decodes a 64 MiB float32 buffer on one thread, interleaved with memcpy
# of the same buffer (median of reps). With a CUDA GPU, the kernels run against a device-to-device
# copy too. LAST line: {"bench":"compress","rows":[{"codec","backend","encode_GBps",...}]}.
# Usage: bench/run compress [BYTES [REPS]]   (default 67108864 bytes, 7 reps)
set -euo pipefail
: "${PACO_ROOT:?run through bench/run}" "${PACO_BUILD_DIR:?run through bench/run}"
bytes="${1:-67108864}"
reps="${2:-7}"
cmake --build "$PACO_BUILD_DIR" --target bench_compress >&2
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cpus;" \
     "one thread; $bytes bytes; $reps reps" >&2
host_json=$(taskset -c 0 "$PACO_BUILD_DIR/bench/compress/bench_compress" "$bytes" "$reps" | tail -1)
cuda_json=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
   cmake --build "$PACO_BUILD_DIR" --target bench_compress_cuda >&2; then
  cuda_json=$("$PACO_BUILD_DIR/bench/compress/bench_compress_cuda" "$bytes" "$reps" | tail -1)
else
  echo "no CUDA GPU (or no nvcc): host rows only" >&2
fi
# merge the rows of both runs into one last line
/usr/bin/python3 - "$host_json" "$cuda_json" <<'PY'
import json, sys
host = json.loads(sys.argv[1])
rows = host["rows"]
out = {"bench": "compress", "rows": rows, "copy_GBps": host.get("copy_GBps"), "bytes": host.get("bytes")}
if sys.argv[2]:
    cuda = json.loads(sys.argv[2])
    rows += cuda["rows"]
    out["device_copy_GBps"] = cuda.get("copy_GBps")
    out["device"] = cuda.get("device")
print(json.dumps(out, separators=(",", ":")))
PY
