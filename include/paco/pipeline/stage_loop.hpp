#pragma once
// stage_loop: one pipeline stage as an inner loop: a stage_runner, the batch sampler every stage
// of the pipeline shares (the same stream, the same seed), and the learning-rate schedule over
// the stage's step count. It has the interface train::path_worker asks of its loop (run,
// step_count, rebind), so a DiPaCo path cut into stages is a path_worker per stage whose loop is
// this one (train/stage_worker.hpp): its optimizer state, auxiliary head and step count carry on
// across rounds while the store sees each stage as one worker pushing its own modules.
//
//   pipeline::stage_loop<nn::gpt, net::inproc> loop(model, plan, opts, B, T, sched, net, shard,
//   seed); double loss = loop.run(arena, adamw, H);  // H steps of this stage; throws on a failed
//   link loop.close();                              // the end of training: drain, closing barrier

#include <cstdint>
#include <memory>
#include <vector>

#include "paco/io/batches.hpp"
#include "paco/optim/schedule.hpp"
#include "paco/pipeline/stage_runner.hpp"

namespace paco::pipeline {

template <nn::BlockModel M, net::Transport T>
class stage_loop {
 public:
  // Stage net.rank() of plan. Requires: as stage_runner's (checked: throws error_exception
  // naming the field); shard outlives the loop (or the next rebind) and holds more than ctx
  // tokens (checked: throws). seed: the batches' (the same on every stage) and the heads'.
  stage_loop(const M& model, const stage_plan& plan, const pipeline_options& o, int batch, int ctx,
             const optim::warmup_cosine& sched, T& net, const io::token_stream& shard,
             std::uint64_t seed)
      : run_(std::make_unique<stage_runner<M, T>>(model, plan, o, batch, ctx, net, seed)),
        sampler_(shard, batch, ctx, seed),
        sched_(sched),
        x_(std::size_t(batch) * ctx),
        y_(x_.size()) {}

  // n steps of this stage at the schedule's learning rate. Returns their mean loss (this stage's
  // own in local mode; NaN on all but the last stage under global backprop), 0 when n = 0.
  // Throws error_exception with the step's error (a lost or silent neighbour: its deadline).
  double run(arena<host>& a, const optim::adamw& opt, int n) {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      sampler_.next(x_.data(), y_.data());
      ++step_;
      auto l = run_->step(a, opt, sched_.lr_at(step_), x_.data(), y_.data());
      if (!l) throw error_exception(l.error());
      sum += *l;
    }
    return n ? sum / n : 0.0;
  }

  long step_count() const noexcept { return step_; }
  // Where the loop stands (as train::inner_loop's where()); a stage cannot seek: it starts at 0.
  struct position {
    long step = 0;
    rng::state_type sampler{};
  };
  position where() const noexcept { return {step_, sampler_.position()}; }
  // Samples from `shard` from the next step on (every stage of the pipeline must rebind alike).
  void rebind(const io::token_stream& shard) { sampler_.rebind(shard); }

  // The end of training: waits for this stage's last sends, then the closing barrier
  // (stage_runner::close). Requires: every stage of the pipeline calls it.
  status close() {
    if (auto s = run_->drain(); !s) return s;
    return run_->close();
  }

  stage_runner<M, T>& runner() noexcept { return *run_; }
  const stage_runner<M, T>& runner() const noexcept { return *run_; }

 private:
  std::unique_ptr<stage_runner<M, T>> run_;  // (stage_runner does not move)
  io::batch_sampler sampler_;
  optim::warmup_cosine sched_;
  std::vector<std::int32_t> x_, y_;
  long step_ = 0;
};

}  // namespace paco::pipeline
