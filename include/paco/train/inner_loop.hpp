#pragma once
// inner_loop: the one inner training loop of paco. Every trainer, tool and benchmark that takes
// optimizer steps on a model runs it: sample a batch from the shard → forward_backward (gradient
// into plane::grad) → clip the gradient's global norm → one inner-optimizer step at the
// schedule's learning rate. The step count is global over the loop's life (the schedule's and
// the optimizer's bias-correction step), the sampler's random stream carries on when the shard
// changes (rebind: a re-routing), and the optimizer state lives in the arena's planes, so
// nothing is reset between rounds or phases.
//
//   train::inner_loop<nn::gpt, optim::adamw> loop(model, cfg, shard, seed);
//   double mean_loss = loop.run(arena, optim::adamw{.lr = 1e-3f}, cfg.steps);
//
// Seams for what comes next: run() takes an on_step callback (a streaming fragment's or an
// overlapped outer sync's trigger point), step() takes the learning rate explicitly (time-based
// schedules), and the replica is reachable for local-loss chunking.
//
// M models train::Model, InnerOpt optim::InnerOptimizer; a Ranged or Pooled optimizer's step runs
// on the replica's threads (optim::step_on: the same result as on one thread).

#include <cstdint>
#include <functional>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/io/batches.hpp"
#include "paco/nn/replica.hpp"
#include "paco/optim/clip.hpp"
#include "paco/optim/concepts.hpp"
#include "paco/optim/schedule.hpp"
#include "paco/train/concepts.hpp"

namespace paco::train {

struct inner_config {
  int batch = 16;                   // sequences per inner step
  int ctx = 128;                    // tokens per sequence
  int steps = 100;                  // H: inner steps per round
  float grad_clip = 1.0f;           // global-norm clip; 0 disables
  optim::warmup_cosine schedule{};  // over the global inner step count
  int threads = 1;                  // cores for forward_backward and the optimizer step
  long start_step = 0;              // inner steps already taken (a resumed or continued run)
};

template <Model M, optim::InnerOptimizer InnerOpt>
class inner_loop {
 public:
  // Requires: shard outlives the loop (or the next rebind) and holds more than ctx tokens
  // (checked by the sampler: throws error_exception).
  inner_loop(const M& model, const inner_config& cfg, const io::token_stream& shard,
             std::uint64_t seed)
      : cfg_(cfg),
        replica_(model, cfg.batch, cfg.ctx, cfg.threads),
        sampler_(shard, cfg.batch, cfg.ctx, seed),
        x_(std::size_t(cfg.batch) * cfg.ctx),
        y_(x_.size()),
        step_(cfg.start_step) {}

  // One inner step on `a` at learning rate lr. Returns the batch's mean loss (nats per token).
  // Ensures: step() advanced by one; plane::grad holds the clipped gradient.
  double step(arena<host>& a, const InnerOpt& opt, float lr) {
    sampler_.next(x_.data(), y_.data());
    const double loss = replica_.forward_backward(a, x_.data(), y_.data());
    auto g = a.get(plane::grad);
    if (cfg_.grad_clip > 0) optim::clip_grad_norm(g.data(), g.size(), cfg_.grad_clip);
    ++step_;
    optim::step_on(replica_.pool(), opt, a, step_, lr);
    return loss;
  }

  // n steps at the configured schedule's learning rate. on_step(step, loss) after each
  // (optional). Returns the mean loss over them (0 when n = 0).
  double run(arena<host>& a, const InnerOpt& opt, int n,
             const std::function<void(long, double)>& on_step = {}) {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const double l = step(a, opt, cfg_.schedule.lr_at(step_ + 1));
      sum += l;
      if (on_step) on_step(step_, l);
    }
    return n ? sum / n : 0.0;
  }

  // Samples from `shard` from the next step on; the random stream carries on.
  // Requires: as the constructor's.
  void rebind(const io::token_stream& shard) { sampler_.rebind(shard); }

  // What a loop resumed from a checkpoint needs beyond the arena: the step count (the
  // schedule, the optimizer's bias correction) and where the sampler's stream stands.
  struct position {
    long step = 0;
    rng::state_type sampler{};
  };
  position where() const noexcept { return {step_, sampler_.position()}; }
  // Ensures: the loop continues exactly as the one where() was taken from (same batches, same
  // step count), given the same arena.
  void seek(const position& p) noexcept {
    step_ = p.step;
    sampler_.seek(p.sampler);
  }

  long step_count() const noexcept { return step_; }
  const inner_config& config() const noexcept { return cfg_; }
  nn::replica<M>& replica() noexcept { return replica_; }

 private:
  inner_config cfg_;
  nn::replica<M> replica_;
  io::batch_sampler sampler_;
  std::vector<std::int32_t> x_, y_;
  long step_ = 0;
};

}  // namespace paco::train
