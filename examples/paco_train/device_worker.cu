// The DiPaCo worker role's device path worker: kernels::path_worker_cuda behind
// device_path_worker, its codecs the device twins of the host worker's (same spec, same
// segments, so the store decodes them as it decodes the host workers' payloads).
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "device.hpp"
#include "paco/arena_cuda.cuh"
#include "paco/path_worker_cuda.cuh"

namespace paco_train {

namespace {

constexpr paco::plane checkpoint_planes[] = {paco::plane::param, paco::plane::anchor,
                                             paco::plane::moment1, paco::plane::moment2,
                                             paco::plane::residual};

class cuda_worker final : public device_path_worker {
 public:
  cuda_worker(int id, const paco::nn::gpt& model, std::vector<paco::path::level_span> levels,
              std::vector<int> modules, paco::optim::adamw opt,
              const paco::train::inner_config& cfg, const paco::io::token_stream& shard,
              std::uint64_t seed, paco::kernels::gemm_math math)
      : w_(id, model, std::move(levels), std::move(modules), opt, cfg, shard, seed) {
    w_.loop().workspace().ctx.set_math(math);
  }
  paco::kernels::path_worker_cuda<paco::nn::gpt>& worker() { return w_; }

  paco::train::path_buffers& buffers() override { return w_.buffers(); }
  double train(int n) override { return w_.train(n); }
  int steps_per_round() const override { return w_.steps_per_round(); }
  paco::status prepare_level(std::size_t l) override { return w_.prepare_level(l); }
  void land_level(std::size_t l, bool fetched, float sigma, float alpha) override {
    w_.land_level(l, fetched, sigma, alpha);
  }
  void weigh_from_here() override { w_.weigh_from_here(); }
  long inner_step() const override { return w_.inner_step(); }
  paco::status download(paco::arena<paco::host>& a) override {
    for (auto p : checkpoint_planes)
      if (w_.state().has(p))
        if (auto s = paco::download(w_.state(), a, p, stream()); !s) return s;
    return w_.loop().workspace().ctx.synchronize();
  }
  paco::status restore(const paco::arena<paco::host>& a) override {
    for (auto p : {paco::plane::moment1, paco::plane::moment2, paco::plane::residual}) {
      if (!a.has(p)) continue;
      if (p == paco::plane::residual && !w_.state().has(p)) continue;
      if (auto s = paco::upload(a, w_.state(), p, stream()); !s) return s;
    }
    return w_.loop().workspace().ctx.synchronize();
  }
  std::string describe() const override {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    return prop.name;
  }

 private:
  cudaStream_t stream() { return w_.loop().workspace().ctx.stream(); }
  paco::kernels::path_worker_cuda<paco::nn::gpt> w_;
};

}  // namespace

paco::result<std::unique_ptr<device_path_worker>> make_device_path_worker(
    int id, const paco::nn::gpt& model, std::vector<paco::path::level_span> levels,
    std::vector<int> modules, paco::optim::adamw opt, const paco::train::inner_config& cfg,
    const paco::io::token_stream& shard, std::uint64_t seed, const std::string& gemm,
    const paco::store::compression& compression) {
  if (gemm != "bf16" && gemm != "tf32" && gemm != "fp32")
    return paco::error(paco::errc::invalid_argument,
                       "train.gemm = \"" + gemm + "\": accepted \"bf16\", \"tf32\" or \"fp32\"");
  if (auto s = device_available(); !s) return s.error();
  std::vector<paco::kernels::device_codec> codecs;
  if (compression.spec.kind != paco::compress::codec_kind::identity) {
    auto host = paco::store::make_codecs(compression, model, levels);
    if (!host) return host.error();
    for (auto& c : *host) {
      auto d = paco::kernels::device_codec::make(c.spec(), c.segments());
      if (!d) return d.error();
      codecs.push_back(std::move(*d));
    }
  }
  try {
    const auto math = gemm == "bf16"   ? paco::kernels::gemm_math::bf16
                      : gemm == "tf32" ? paco::kernels::gemm_math::tf32
                                       : paco::kernels::gemm_math::fp32;
    auto w = std::make_unique<cuda_worker>(id, model, std::move(levels), std::move(modules), opt,
                                           cfg, shard, seed, math);
    if (!codecs.empty())
      if (auto s = w->worker().set_codecs(std::move(codecs)); !s) return s.error();
    return std::unique_ptr<device_path_worker>(std::move(w));
  } catch (const paco::error_exception& e) {
    return e.err;
  } catch (const std::bad_alloc&) {
    return paco::error(paco::errc::unsupported, "train.device = \"cuda\": out of device memory");
  }
}

}  // namespace paco_train
