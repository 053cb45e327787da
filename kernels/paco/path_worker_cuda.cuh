#pragma once
// path_worker_cuda: train::path_worker with its replica on the device, for any module store
// (store::local_store, store::client over TCP), under every sync rule: it models
// train::PathWorker, so the store exchange's round body (train::run_worker) drives it as it
// drives the host worker. Its store traffic goes through the same host-side path_buffers
// (train/path_buffers.hpp); the device holds θ, θ_start, the inner optimizer state, the
// error-feedback residual (plane::residual) and the last measured Δ of every level:
//   prepare_level(l)   Δ_l = θ_start,l − θ_l on the device (kept for land_level's σ) → its codec's
//                      payload (encoded on the device, only the bodies come down) or, without
//                      codecs, the fp32 Δ_l (4 bytes an element down)
//   land_level(l, …)   the fetched module G_l up into θ_start,l (when fetched), then on the device
//                      g ← θ_start,l − σ·Δ_l, θ_start,l ← g, θ_l ← α·θ_l + (1 − α)·g, each
//                      operation rounded on its own (no fused multiply-add), as the host twin
//                      (train::path_worker::land_level) writes it
// A pull (train::pull) is a fetch and a landing at σ = α = 0. transfers() counts the worker's
// own copies each way (modules up, Δ or payloads down); the inner loop's (batches up, losses
// down) are loop().transfers(). train and land_level throw error_exception on a failed call.
//
//   kernels::path_worker_cuda<nn::gpt> w(id, model, plan.path_spans(p), plan.path_modules(p),
//                                        optim::adamw{.lr = 1e-3f}, cfg, shard, seed);
//   w.set_codecs(device codecs of make_codecs(compression, model, plan.path_spans(p)));
//   train::run_worker(w, store, {.rounds = 10, .sync = train::co2{}});
#include <cuda_runtime.h>

#include <chrono>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "paco/arena_cuda.cuh"
#include "paco/codec_cuda.cuh"
#include "paco/inner_loop_cuda.cuh"
#include "paco/path/level_map.hpp"
#include "paco/train/path_buffers.hpp"

namespace paco::kernels {

namespace detail {
template <int = 0>
__global__ void span_difference_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                       float* __restrict__ d, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    d[i] = a[i] - b[i];
}

// g ← start − σ·d (d: null for σ = 0), start ← g, θ ← α·θ + (1 − α)·g (α = 0: g; α = 1: θ kept).
template <int = 0>
__global__ void land_kernel(float* __restrict__ start, float* __restrict__ theta,
                            const float* __restrict__ d, float sigma, float alpha, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float g = start[i];
    if (d) g = __fsub_rn(g, __fmul_rn(sigma, d[i]));
    start[i] = g;
    if (alpha == 0.0f)
      theta[i] = g;
    else if (alpha != 1.0f)
      theta[i] = __fadd_rn(__fmul_rn(alpha, theta[i]), __fmul_rn(1.0f - alpha, g));
  }
}
}  // namespace detail

template <class Model>
class path_worker_cuda {
 public:
  using path_worker_tag = void;  // models train::PathWorker

  // modules[l] is the store's id of this worker's module at level l; levels[l] its span.
  // Throws error_exception when the device is unusable or has no room (naming why).
  path_worker_cuda(int id, const Model& model, std::vector<path::level_span> levels,
                   std::vector<int> modules, optim::adamw opt, train::inner_config cfg,
                   const io::token_stream& shard, std::uint64_t seed, int device = 0)
      : buf_(id, std::move(levels), std::move(modules), model.layout().total()),
        opt_(opt),
        cfg_(cfg),
        loop_(model, cfg, shard, seed, device),
        arena_(model.layout()),
        delta_(model.layout().total()),
        shard_tokens_(double(shard.ids.size())) {
    arena_.get(plane::moment1);
    arena_.get(plane::moment2);
    arena_.get(plane::anchor);
  }

  int id() const noexcept { return buf_.id(); }
  arena<cuda>& state() noexcept { return arena_; }
  train::path_buffers& buffers() noexcept { return buf_; }
  long inner_step() const noexcept { return loop_.step_count(); }
  int steps_per_round() const noexcept { return cfg_.steps; }
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
    return train::adopt_codecs(buf_, arena_, codecs_, std::move(codecs));
  }

  // Runs n inner steps (H by default) on the device. Returns their mean loss.
  double train(int n = -1) {
    if (n < 0) n = cfg_.steps;
    if (n > 0) last_loss_ = loop_.run(arena_, opt_, n);
    return last_loss_;
  }

  // As path_worker::prepare_level, on the device (see the file comment). Errors: a CUDA call's,
  // the codec's.
  status prepare_level(std::size_t l) {
    PACO_ASSERT(l < buf_.levels().size(), "a level of the path");
    auto& ctx = loop_.workspace().ctx;
    const std::size_t o = buf_.levels()[l].offset, n = buf_.levels()[l].size;
    buf_.set_weight(train::path_buffers::weight_of(shard_tokens_, loop_.step_count() - pulled_step_,
                                                   cfg_.steps));
    detail::span_difference_kernel<<<elementwise_blocks(n), 256, 0, ctx.stream()>>>(
        arena_.get(plane::anchor).data() + o, arena_.get(plane::param).data() + o,
        delta_.data() + o, n);
    if (auto s = cuda_status(cudaGetLastError(), "Δ launch"); !s) return s;
    if (codecs_.empty()) {
      auto& d = buf_.delta(l);
      d.resize(n);
      if (auto s = download(std::as_const(delta_).view().sub(o, n), slice<float>(d.data(), n),
                            ctx.stream(), &log_);
          !s)
        return s;
      return ctx.synchronize();
    }
    float* res = codecs_[l].error_feedback() ? arena_.get(plane::residual).data() + o : nullptr;
    if (auto s = codecs_[l].encode(ctx, delta_.data() + o, res, buf_.payload(l), &log_); !s)
      return s;
    payload_bytes_ += buf_.payload(l).size();
    return {};
  }

  // As path_worker::land_level, on the device (see the file comment). Requires: a fetch of l
  // (fetched), a prepare_level(l) (σ ≠ 0). Throws error_exception on a failed CUDA call.
  void land_level(std::size_t l, bool fetched, float sigma, float alpha) {
    PACO_ASSERT(l < buf_.levels().size(), "a level of the path");
    auto& ctx = loop_.workspace().ctx;
    const std::size_t o = buf_.levels()[l].offset, n = buf_.levels()[l].size;
    auto an = arena_.get(plane::anchor);
    const auto check = [](status s) {
      if (!s) throw error_exception(s.error());
    };
    if (fetched) {
      const auto g = buf_.fetched(l);
      check(upload(slice<const float>(g.data(), n), an.sub(o, n), ctx.stream(), &log_));
    }
    detail::land_kernel<<<elementwise_blocks(n), 256, 0, ctx.stream()>>>(
        an.data() + o, arena_.get(plane::param).data() + o,
        sigma == 0.0f ? nullptr : delta_.data() + o, sigma, alpha, n);
    check(cuda_status(cudaGetLastError(), "landing launch"));
    if (fetched) check(ctx.synchronize());  // the next fetch reuses the buffer
  }
  // The next push weighs the steps trained from this one, as after a pull.
  void weigh_from_here() noexcept { pulled_step_ = loop_.step_count(); }

 private:
  train::path_buffers buf_;
  optim::adamw opt_;
  train::inner_config cfg_;
  inner_loop_cuda<Model> loop_;
  arena<cuda> arena_;
  buffer<float, cuda> delta_;  // per level, its last measured Δ (the plane's layout)
  double shard_tokens_;
  long pulled_step_ = 0;
  std::vector<device_codec> codecs_;
  std::size_t payload_bytes_ = 0;
  transfer_log log_;
  double last_loss_ = 0;
};

}  // namespace paco::kernels
