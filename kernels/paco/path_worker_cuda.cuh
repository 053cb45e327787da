#pragma once
// path_worker_cuda: train::path_worker with its replica on the device, for any module store
// (store::local_store, store::client over TCP). A round is
//   pull every module of the path (host bytes from the store, hash-checked on the host, uploaded
//   into θ's spans; θ_start ← θ on the device) → H inner steps on the device (inner_loop_cuda)
//   → per module, Δ = θ_start − θ on the device → push: device_codec's payload (encoded on the
//   device, only its bytes come down) or, without codecs, the fp32 Δ (4 bytes an element down)
// The inner optimizer state and the error-feedback residual (plane::residual) stay on the
// device across rounds. transfers() counts the worker's own copies each way (pulls up, payloads
// down); the inner loop's (batches up, losses down) are loop().transfers().
//
//   kernels::path_worker_cuda<nn::gpt> w(id, model, plan.path_spans(p), plan.path_modules(p),
//                                        optim::adamw{.lr = 1e-3f}, cfg, shard, seed);
//   w.set_codecs(device codecs of make_codecs(compression, model, plan.path_spans(p)));
//   train::sync_round(w, store, std::chrono::minutes(5));   // or train::run_worker
#include <cuda_runtime.h>

#include <chrono>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "paco/arena_cuda.cuh"
#include "paco/codec_cuda.cuh"
#include "paco/core/hash.hpp"
#include "paco/inner_loop_cuda.cuh"
#include "paco/path/level_map.hpp"
#include "paco/store/concepts.hpp"

namespace paco::kernels {

namespace detail {
template <int = 0>
__global__ void span_difference_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                       float* __restrict__ d, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    d[i] = a[i] - b[i];
}
}  // namespace detail

template <class Model>
class path_worker_cuda {
 public:
  using path_worker_tag = void;  // models train::PathWorker: train::run_worker drives it too

  // modules[l] is the store's id of this worker's module at level l; levels[l] its span.
  // Throws error_exception when the device is unusable or has no room (naming why).
  path_worker_cuda(int id, const Model& model, std::vector<path::level_span> levels,
                   std::vector<int> modules, optim::adamw opt, train::inner_config cfg,
                   const io::token_stream& shard, std::uint64_t seed, int device = 0)
      : id_(id),
        levels_(std::move(levels)),
        modules_(std::move(modules)),
        opt_(opt),
        cfg_(cfg),
        loop_(model, cfg, shard, seed, device),
        arena_(model.layout()),
        shard_tokens_(double(shard.ids.size())) {
    PACO_ASSERT(levels_.size() == modules_.size(), "one module per level");
    std::size_t widest = 0;
    for (auto& l : levels_) widest = std::max(widest, l.size);
    delta_.resize(widest);
    host_.resize(widest);
    arena_.get(plane::moment1);
    arena_.get(plane::moment2);
    arena_.get(plane::anchor);
  }

  int id() const noexcept { return id_; }
  arena<cuda>& state() noexcept { return arena_; }
  const std::vector<int>& modules() const noexcept { return modules_; }
  long round() const noexcept { return round_; }
  long inner_step() const noexcept { return loop_.step_count(); }
  double last_loss() const noexcept { return last_loss_; }
  inner_loop_cuda<Model>& loop() noexcept { return loop_; }
  const transfer_log& transfers() const noexcept { return log_; }
  std::size_t payload_bytes() const noexcept { return payload_bytes_; }

  // As path_worker::set_shard.
  void set_shard(const io::token_stream& shard) {
    loop_.rebind(shard);
    shard_tokens_ = double(shard.ids.size());
  }

  // Encoded pushes from now on: codecs[l] encodes level l's module (device_codec::make from the
  // spec and segments of make_codecs over this worker's level spans). Errors: mismatch if the
  // count or a codec's size differs from the levels'.
  status set_codecs(std::vector<device_codec> codecs) {
    if (codecs.size() != levels_.size())
      return {errc::mismatch, "worker " + std::to_string(id_) + ": " +
                                  std::to_string(codecs.size()) + " codecs for " +
                                  std::to_string(levels_.size()) + " levels"};
    for (std::size_t l = 0; l < levels_.size(); ++l)
      if (codecs[l].size() != levels_[l].size)
        return {errc::mismatch, "worker " + std::to_string(id_) + ": the codec of level " +
                                    std::to_string(l) + " covers " +
                                    std::to_string(codecs[l].size()) + " elements, the level " +
                                    std::to_string(levels_[l].size)};
    for (auto& c : codecs)
      if (c.error_feedback()) arena_.get(plane::residual);
    codecs_ = std::move(codecs);
    return {};
  }

  // Pulls every module of the path into θ and θ_start. Errors: as path_worker::pull (mismatch
  // for a hash that differs from the store's, or modules at different rounds), or a CUDA error.
  template <store::ModuleStore Store>
  status pull(Store& store) {
    auto& ctx = loop_.workspace().ctx;
    auto th = arena_.get(plane::param);
    long r = -1;
    std::vector<long> rounds;
    for (std::size_t l = 0; l < levels_.size(); ++l) {
      const auto span = std::span<float>(host_.data(), levels_[l].size);
      auto got = store.pull(modules_[l], span);
      if (!got) return got.error();
      const auto [round, h] = *got;
      if (hash64(span.data(), span.size_bytes()) != h)
        return {errc::mismatch, "module " + std::to_string(modules_[l]) +
                                    " arrived with a different hash than the store's"};
      rounds.push_back(round);
      if (r >= 0 && round != r) {  // the others' rounds too, so a retry can see them move
        for (std::size_t k = l + 1; k < levels_.size(); ++k) {
          auto more = store.pull(modules_[k], std::span<float>(host_.data(), levels_[k].size));
          if (!more) return more.error();
          rounds.push_back(more->round);
        }
        return store::rounds_differ(id_, modules_, rounds);
      }
      r = round;
      if (auto s = upload(slice<const float>(span.data(), span.size()),
                          th.sub(levels_[l].offset, levels_[l].size), ctx.stream(), &log_);
          !s)
        return s;
      if (auto s = ctx.synchronize(); !s) return s;  // host_ is reused by the next level
    }
    round_ = r;
    auto an = arena_.get(plane::anchor);
    return cuda_status(cudaMemcpyAsync(an.data(), th.data(), th.size_bytes(),
                                       cudaMemcpyDeviceToDevice, ctx.stream()),
                       "θ_start copy");
  }

  // Runs n inner steps (H by default) on the device. Returns their mean loss.
  double train(int n = -1) {
    if (n < 0) n = cfg_.steps;
    if (n > 0) last_loss_ = loop_.run(arena_, opt_, n);
    return last_loss_;
  }

  // Pushes Δ = θ_start − θ for every module of the path, as path_worker::push: every module is
  // tried even if one push fails; the first error is returned.
  template <store::ModuleStore Store>
  status push(Store& store) {
    auto& ctx = loop_.workspace().ctx;
    auto th = arena_.get(plane::param);
    auto an = arena_.get(plane::anchor);
    status first;
    for (std::size_t l = 0; l < levels_.size(); ++l) {
      const std::size_t o = levels_[l].offset, n = levels_[l].size;
      detail::span_difference_kernel<<<elementwise_blocks(n), 256, 0, ctx.stream()>>>(
          an.data() + o, th.data() + o, delta_.data(), n);
      status s = cuda_status(cudaGetLastError(), "Δ launch");
      if (s && codecs_.empty()) {
        s = download(std::as_const(delta_).view().sub(0, n), slice<float>(host_.data(), n),
                     ctx.stream(), &log_);
        if (s) s = ctx.synchronize();
        if (s)
          s = store.push(modules_[l], id_, round_, std::span<const float>(host_.data(), n),
                         shard_tokens_);
      } else if (s) {
        if constexpr (store::EncodedModuleStore<Store>) {
          float* res =
              codecs_[l].error_feedback() ? arena_.get(plane::residual).data() + o : nullptr;
          s = codecs_[l].encode(ctx, delta_.data(), res, payload_, &log_);
          if (s) {
            payload_bytes_ += payload_.size();
            s = store.push_encoded(modules_[l], id_, round_, std::span<const std::byte>(payload_),
                                   shard_tokens_);
          }
        } else {
          s = {errc::unsupported, "worker " + std::to_string(id_) +
                                      ": this store takes fp32 pushes only (no push_encoded)"};
        }
      }
      if (!s && first.ok()) first = s;
    }
    return first;
  }

 private:
  int id_;
  std::vector<path::level_span> levels_;
  std::vector<int> modules_;
  optim::adamw opt_;
  train::inner_config cfg_;
  inner_loop_cuda<Model> loop_;
  arena<cuda> arena_;
  double shard_tokens_;
  buffer<float, cuda> delta_;
  std::vector<float> host_;
  std::vector<device_codec> codecs_;
  std::vector<std::byte> payload_;
  std::size_t payload_bytes_ = 0;
  transfer_log log_;
  long round_ = 0;
  double last_loss_ = 0;
};

}  // namespace paco::kernels
