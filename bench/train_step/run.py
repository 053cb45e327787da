"""bench/run train_step: paco's GPT training step against PyTorch in the same run.

For three GPT sizes (4 layers, 4 heads, batch 16) at 1 and 2 threads, paco and PyTorch run
interleaved, REPS times each, and the medians are compared. PyTorch runs twice: as installed,
and tuned (OpenBLAS with an AVX-512 core type, the OpenMP build of OpenBLAS, large glibc
mmap/trim thresholds: its best configuration on this machine); the ratio is against the tuned
one. The same run measures the CPU's peak FP32 rate and the GEMM rate of the step's largest
matmul. The LAST line is one JSON object.
"""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.environ["PACO_ROOT"]
BUILD = os.environ["PACO_BUILD_DIR"]
BIN = os.path.join(BUILD, "bench", "train_step")
REPS = int(os.environ.get("PACO_BENCH_REPS", "3"))
SIZES = [(128, 128), (256, 256), (448, 256)]  # (d, ctx): ≈ 0.8M, 3.3M, 9.9M parameters
THREADS = [1, 2]
AVX512 = "avx512f" in open("/proc/cpuinfo").read()
CORE = "SKYLAKEX" if AVX512 else ""


def env_with(threads, **kv):
    e = dict(os.environ)
    e.update({"OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)})
    for k, v in kv.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def run(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("tok_s"):
            f = line.split()
            return {f[i]: f[i + 1] for i in range(0, len(f) - 1, 2)}
    raise RuntimeError(f"no result from {cmd}: {out}")


def main():
    peaks = {}
    out = subprocess.run([os.path.join(BIN, "bench_peak_flops"), str(max(THREADS))],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        t, g = line.split()
        peaks[int(t)] = float(g)
    print(f"peak FP32: " + ", ".join(f"{t} thread(s) {g:.1f} GFLOP/s" for t, g in peaks.items()))
    tuned = {"OPENBLAS_CORETYPE": "COOPERLAKE" if AVX512 else None,
             "LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu/openblas-openmp",
             "MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
    print(f"paco: OPENBLAS_CORETYPE={CORE or 'auto'}; torch tuned: {tuned}; "
          f"torch as installed: OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'auto')}")
    peer = os.path.join(ROOT, "bench", "peers", "torch_gpt.py")
    rows = []
    for d, ctx in SIZES:
        for th in THREADS:
            steps = "5" if d >= 448 else "8" if d >= 256 else "20"
            args = ["--d", str(d), "--ctx", str(ctx), "--threads", str(th), "--steps", steps,
                    "--warmup", "2"]
            p, tt, ti = [], [], []
            info = {}
            for _ in range(REPS):
                info = run([os.path.join(BIN, "bench_train_step")] + args,
                           env_with(th, OPENBLAS_CORETYPE=CORE or None))
                p.append(float(info["tok_s"]))
                tt.append(float(run(["/usr/bin/python3", peer] + args, env_with(th, **tuned))["tok_s"]))
                ti.append(float(run(["/usr/bin/python3", peer] + args, env_with(th))["tok_s"]))
            params = int(info["params"])
            fpt = float(info["flops_per_token"])
            pm, tm, im = statistics.median(p), statistics.median(tt), statistics.median(ti)
            row = {"params": params, "threads": th, "paco_tok_s": round(pm, 1),
                   "torch_tok_s": round(tm, 1), "torch_as_installed_tok_s": round(im, 1),
                   "ratio": round(pm / tm, 3),
                   "paco_peak_frac": round(pm * fpt / (peaks[th] * 1e9), 3)}
            rows.append(row)
            print(f"d={d:3d} ctx={ctx} params={params / 1e6:.2f}M threads={th}: paco {pm:8.0f} tok/s"
                  f"  torch tuned {tm:8.0f}  as installed {im:8.0f}  ratio {pm / tm:.2f}"
                  f"  paco {row['paco_peak_frac'] * 100:.0f}% of peak", flush=True)
    # Largest matmul of the 9.9M step at 1 thread: the MLP's (B·T, C) x (C, 4C).
    d, ctx = SIZES[-1]
    g = subprocess.run([os.path.join(BIN, "bench_gemm"), str(16 * ctx), str(4 * d), str(d)],
                       env=env_with(1, OPENBLAS_CORETYPE=CORE or None), check=True,
                       capture_output=True, text=True).stdout.split()
    gemm_frac = float(g[0]) / peaks[1]
    print(f"GEMM {16 * ctx}x{4 * d}x{d}: {g[0]} GFLOP/s ({' '.join(g[1:])}), "
          f"{gemm_frac * 100:.0f}% of the 1-thread peak")
    print(json.dumps({"bench": "train_step", "peak_gflops_1t": peaks[1], "rows": rows,
                      "gemm_peak_frac": round(gemm_frac, 3)}))


if __name__ == "__main__":
    sys.exit(main())
