// The LM job's device trainer: kernels::inner_loop_cuda over an arena<cuda>, θ and the AdamW
// moments moved whole between host and device only when the job evaluates or checkpoints.
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "device.hpp"
#include "paco/arena_cuda.cuh"
#include "paco/inner_loop_cuda.cuh"

namespace paco_train {

namespace {

class cuda_lm final : public device_lm {
 public:
  cuda_lm(const paco::nn::gpt& model, const paco::train::inner_config& cfg,
          const paco::io::token_stream& shard, std::uint64_t seed, paco::kernels::gemm_math math)
      : loop_(model, cfg, shard, seed), a_(model.layout()) {
    loop_.workspace().ctx.set_math(math);
    math_ = math == paco::kernels::gemm_math::bf16   ? "bf16"
            : math == paco::kernels::gemm_math::tf32 ? "TF32"
                                                     : "fp32";
  }
  double step(const paco::optim::adamw& opt, float lr) override { return loop_.step(a_, opt, lr); }
  paco::status upload(const paco::arena<paco::host>& a) override {
    for (auto p : {paco::plane::param, paco::plane::moment1, paco::plane::moment2})
      if (a.has(p))
        if (auto s = paco::upload(a, a_, p, stream()); !s) return s;
    return loop_.workspace().ctx.synchronize();
  }
  paco::status download(paco::arena<paco::host>& a) override {
    for (auto p : {paco::plane::param, paco::plane::moment1, paco::plane::moment2})
      if (a_.has(p))
        if (auto s = paco::download(a_, a, p, stream()); !s) return s;
    return loop_.workspace().ctx.synchronize();
  }
  std::string describe() const override {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, loop_.workspace().ctx.device());
    return std::string(prop.name) + ", " + math_ + " GEMMs";
  }

 private:
  cudaStream_t stream() { return loop_.workspace().ctx.stream(); }
  paco::kernels::inner_loop_cuda<paco::nn::gpt> loop_;
  paco::arena<paco::cuda> a_;
  std::string math_;
};

}  // namespace

paco::status device_available() {
  int count = 0;
  if (const auto e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0)
    return {paco::errc::unsupported,
            std::string("train.device = \"cuda\": no usable CUDA device (") +
                (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)) + ")"};
  return {};
}

paco::result<std::unique_ptr<device_lm>> make_device_lm(const paco::nn::gpt& model,
                                                        const paco::train::inner_config& cfg,
                                                        const paco::io::token_stream& shard,
                                                        std::uint64_t seed,
                                                        const std::string& gemm) {
  if (gemm != "bf16" && gemm != "tf32" && gemm != "fp32")
    return paco::error(paco::errc::invalid_argument,
                       "train.gemm = \"" + gemm + "\": accepted \"bf16\", \"tf32\" or \"fp32\"");
  if (auto s = device_available(); !s) return s.error();
  try {
    return std::unique_ptr<device_lm>(
        std::make_unique<cuda_lm>(model, cfg, shard, seed,
                                  gemm == "bf16"   ? paco::kernels::gemm_math::bf16
                                  : gemm == "tf32" ? paco::kernels::gemm_math::tf32
                                                   : paco::kernels::gemm_math::fp32));
  } catch (const paco::error_exception& e) {
    return e.err;
  } catch (const std::bad_alloc&) {
    return paco::error(paco::errc::unsupported, "train.device = \"cuda\": out of device memory");
  }
}

}  // namespace paco_train
