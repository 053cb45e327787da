#pragma once
// inner_loop_cuda: train::inner_loop with the replica on the device. Same sampler, schedule,
// clipping and AdamW formula as the host loop (so the two take the same batches and the same
// steps); θ, ∇, the moments and the activations stay in device memory. A step uploads its batch
// (2·B·T int32), runs the model's forward_backward on the device, clips and steps there, and
// downloads the loss (8 bytes); the transfer_log counts the bytes each way.
//
//   arena<cuda> dev(model.layout());
//   upload(host_arena, dev, plane::param, nullptr);
//   kernels::inner_loop_cuda<nn::gpt> loop(model, cfg, shard, seed);
//   double mean_loss = loop.run(dev, optim::adamw{.lr = 1e-3f}, cfg.steps);
//
// The device inner optimizer is AdamW (optim::adamw's fields). cfg.threads is unused here.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "paco/arena_cuda.cuh"
#include "paco/io/batches.hpp"
#include "paco/nn/lm_cuda.cuh"
#include "paco/optim/adamw.hpp"
#include "paco/optim_cuda.cuh"
#include "paco/train/inner_loop.hpp"

namespace paco::kernels {

template <class M>
class inner_loop_cuda {
 public:
  // Requires: as train::inner_loop's (the sampler checks the shard: throws error_exception);
  // a usable device (throws error_exception naming what failed).
  inner_loop_cuda(const M& model, const train::inner_config& cfg, const io::token_stream& shard,
                  std::uint64_t seed, int device = 0)
      : model_(model),
        cfg_(cfg),
        ws_(make_lm_workspace(model, {cfg.batch, cfg.ctx}, device).value_or_throw()),
        sampler_(shard, cfg.batch, cfg.ctx, seed),
        x_(std::size_t(cfg.batch) * cfg.ctx),
        y_(x_.size()),
        x_dev_(x_.size()),
        y_dev_(x_.size()),
        step_(cfg.start_step) {}

  // One inner step on `a` at learning rate lr. Returns the batch's mean loss (nats per token).
  // Ensures: step() advanced by one; plane::grad holds the clipped gradient.
  double step(arena<cuda>& a, const optim::adamw& opt, float lr) {
    sampler_.next(x_.data(), y_.data());
    auto& ctx = ws_.ctx;
    ctx.scratch().reset();
    check(upload_ids(x_, x_dev_));
    check(upload_ids(y_, y_dev_));
    {
      const auto timed = ctx.scope(phase::optimizer);  // the gradient's reset
      check(a.zero(plane::grad, ctx.stream()));
    }
    auto theta = a.get(plane::param);
    auto g = a.get(plane::grad);
    const double loss =
        forward_backward(model_, theta.data(), g.data(), x_dev_.data(), y_dev_.data(), ws_);
    log_.d2h_bytes += sizeof(double), ++log_.d2h_copies;  // the loss the pass downloaded
    ++step_;
    {
      const auto timed = ctx.scope(phase::optimizer);
      if (cfg_.grad_clip > 0) check(clip_grad_norm(ctx, g.data(), g.size(), cfg_.grad_clip));
      check(adamw_step(opt, a, step_, lr, ctx.stream()));
    }
    return loss;
  }

  // n steps at the schedule's learning rate; on_step(step, loss) after each (optional). Returns
  // the mean loss over them (0 when n = 0).
  double run(arena<cuda>& a, const optim::adamw& opt, int n,
             const std::function<void(long, double)>& on_step = {}) {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const double l = step(a, opt, cfg_.schedule.lr_at(step_ + 1));
      sum += l;
      if (on_step) on_step(step_, l);
    }
    return n ? sum / n : 0.0;
  }

  void rebind(const io::token_stream& shard) { sampler_.rebind(shard); }
  long step_count() const noexcept { return step_; }
  const train::inner_config& config() const noexcept { return cfg_; }
  lm_workspace<M>& workspace() noexcept { return ws_; }
  const lm_workspace<M>& workspace() const noexcept { return ws_; }
  // Bytes the loop's own copies moved (the batches up, the losses down).
  const transfer_log& transfers() const noexcept { return log_; }

 private:
  static void check(const status& s) { s.throw_if_error(); }
  status upload_ids(const std::vector<std::int32_t>& h, buffer<std::int32_t, cuda>& d) {
    const std::size_t bytes = h.size() * sizeof(std::int32_t);
    if (auto s = cuda_status(
            cudaMemcpyAsync(d.data(), h.data(), bytes, cudaMemcpyHostToDevice, ws_.ctx.stream()),
            "inner_loop_cuda batch upload");
        !s)
      return s;
    log_.h2d_bytes += bytes, ++log_.h2d_copies;
    return {};
  }

  const M& model_;
  train::inner_config cfg_;
  lm_workspace<M> ws_;
  io::batch_sampler sampler_;
  std::vector<std::int32_t> x_, y_;
  buffer<std::int32_t, cuda> x_dev_, y_dev_;
  long step_ = 0;
  transfer_log log_;
};

}  // namespace paco::kernels
