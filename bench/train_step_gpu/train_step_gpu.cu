// bench_train_step_gpu: the GPT training step of kernels::inner_loop_cuda (the library's device
// inner loop: forward, backward, global-norm clip, AdamW) at three sizes, against the GEMM peak
// of this device measured in the same run by large cuBLAS GEMMs (bf16 in / fp32 accumulate, and
// TF32). MFU = model FLOPs per token (gpt::train_flops_per_token) × tokens/s ÷ the bf16 peak.
// Then a profiling pass (a phase_timer on the context) splits a step by phase.
// LAST line: one JSON object (see run.sh).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "paco/arena_cuda.cuh"
#include "paco/inner_loop_cuda.cuh"
#include "paco/nn/gpt.hpp"

namespace pk = paco::kernels;

namespace {

struct size_row {
  const char* name;
  paco::nn::gpt_config cfg;
  int batch;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// TFLOP/s of an M=N=K=n GEMM, median of reps, in bf16 (bf16 in and out, fp32 accumulate) or
// TF32 (fp32 in and out, TF32 products).
double gemm_peak(bool bf16, int n, int reps) {
  cublasHandle_t h;
  cublasCreate(&h);
  const std::size_t elems = std::size_t(n) * n, bytes = elems * (bf16 ? 2 : 4);
  void *A, *B, *C;
  cudaMalloc(&A, bytes);
  cudaMalloc(&B, bytes);
  cudaMalloc(&C, bytes);
  cudaMemset(A, 0, bytes);  // zeros: the speed of a dense GEMM does not depend on values here
  cudaMemset(B, 0, bytes);
  const float one = 1, zero = 0;
  const auto type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const auto compute = bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  auto run = [&] {
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, type, n, B, type, n, &zero, C, type,
                 n, compute, CUBLAS_GEMM_DEFAULT);
  };
  run();
  cudaDeviceSynchronize();
  std::vector<double> t;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a);
    run();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(2.0 * double(n) * n * n / (ms * 1e-3) / 1e12);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cublasDestroy(h);
  return median(t);
}

std::string json_row(const size_row& s, const paco::nn::gpt& model, double tokens_per_s,
                     double step_ms, double peak_bf16, double peak_tf32, const char* math,
                     const std::array<double, pk::phase_count>& phase_ms) {
  const double flops = model.train_flops_per_token(s.cfg.ctx) * tokens_per_s;
  std::ostringstream o;
  o.precision(4);
  o << "{\"name\":\"" << s.name << "\",\"params\":" << model.param_count()
    << ",\"ctx\":" << s.cfg.ctx << ",\"batch\":" << s.batch << ",\"math\":\"" << math
    << "\",\"tokens_per_s\":" << std::fixed << tokens_per_s << std::defaultfloat
    << ",\"step_ms\":" << step_ms << ",\"mfu\":" << flops / (peak_bf16 * 1e12)
    << ",\"mfu_tf32\":" << flops / (peak_tf32 * 1e12) << ",\"phases_ms\":{";
  for (int p = 0; p < pk::phase_count; ++p)
    o << (p ? "," : "") << "\"" << pk::phase_name(pk::phase(p)) << "\":" << phase_ms[p];
  o << "}}";
  return o.str();
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  std::string sizes = "small,medium,gpt2", math_name = "bf16";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes = argv[++i];
    } else if (a == "--math" && i + 1 < argc) {
      math_name = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--steps N] [--sizes small,medium,gpt2] [--math bf16|tf32|fp32]\n",
                   argv[0]);
      return 2;
    }
  }
  if (steps < 3 || (math_name != "bf16" && math_name != "tf32" && math_name != "fp32")) {
    std::fprintf(stderr, "train_step_gpu: --steps must be ≥ 3 and --math bf16, tf32 or fp32\n");
    return 2;
  }
  const auto math = math_name == "bf16"   ? pk::gemm_math::bf16
                    : math_name == "tf32" ? pk::gemm_math::tf32
                                          : pk::gemm_math::fp32;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "train_step_gpu: no usable CUDA device\n");
    return 77;
  }
  const double peak_bf16 = gemm_peak(true, 8192, 15), peak_tf32 = gemm_peak(false, 8192, 9);
  std::fprintf(stderr, "%s: measured GEMM peak %.1f TFLOP/s bf16, %.1f TFLOP/s TF32\n", prop.name,
               peak_bf16, peak_tf32);

  const std::vector<size_row> all = {
      {"small", {.vocab = 256, .ctx = 256, .d = 256, .layers = 4, .heads = 4}, 32},
      {"medium", {.vocab = 256, .ctx = 512, .d = 512, .layers = 8, .heads = 8}, 16},
      {"gpt2", {.vocab = 50257, .ctx = 1024, .d = 768, .layers = 12, .heads = 12}, 8},
  };
  std::vector<std::string> rows;
  for (const auto& s : all) {
    if (sizes.find(s.name) == std::string::npos) continue;
    try {
      const paco::nn::gpt model(s.cfg);
      paco::io::token_stream shard;
      paco::rng g(1);
      shard.ids.resize(std::size_t(1) << 22);
      for (auto& t : shard.ids) t = std::int32_t(g.below(std::uint64_t(s.cfg.vocab)));
      shard.doc_start = {0};
      paco::train::inner_config cfg{.batch = s.batch, .ctx = s.cfg.ctx, .grad_clip = 1.0f};
      cfg.schedule = {.lr = 6e-4f, .min_lr = 6e-5f, .warmup = 10, .total = 1000};
      paco::arena<paco::host> ha(model.layout());
      model.init(ha, 1);
      paco::arena<paco::cuda> da(model.layout());
      pk::inner_loop_cuda<paco::nn::gpt> loop(model, cfg, shard, 2);
      auto& ctx = loop.workspace().ctx;
      ctx.set_math(math);
      paco::upload(ha, da, paco::plane::param, ctx.stream()).throw_if_error();
      const paco::optim::adamw opt{.lr = 6e-4f};
      loop.run(da, opt, 3);  // warm-up: cuBLAS heuristics, the moment planes' allocation
      std::vector<double> ms;
      for (int i = 0; i < steps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        loop.run(da, opt, 1);  // returns after the loss download: the step has finished
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      const double step_ms = median(ms);
      pk::phase_timer timer;
      ctx.set_timer(&timer);
      loop.run(da, opt, 3);
      ctx.synchronize().throw_if_error();
      auto phase_ms = timer.milliseconds();
      for (auto& v : phase_ms) v /= 3;
      ctx.set_timer(nullptr);
      const double tps = double(s.batch) * s.cfg.ctx / (step_ms * 1e-3);
      rows.push_back(
          json_row(s, model, tps, step_ms, peak_bf16, peak_tf32, math_name.c_str(), phase_ms));
      std::fprintf(stderr, "%-6s %6.1fM params ctx %4d batch %2d: %.1f ms/step, %.0f tokens/s\n",
                   s.name, model.param_count() / 1e6, s.cfg.ctx, s.batch, step_ms, tps);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "train_step_gpu: %s failed: %s\n", s.name, e.what());
      return 1;
    }
  }
  std::printf(
      "{\"bench\":\"train_step_gpu\",\"device\":\"%s\",\"peak_bf16_tflops\":%.1f,"
      "\"peak_tf32_tflops\":%.1f,\"rows\":[",
      prop.name, peak_bf16, peak_tf32);
  for (std::size_t i = 0; i < rows.size(); ++i) std::printf("%s%s", i ? "," : "", rows[i].c_str());
  std::printf("]}\n");
  return 0;
}
