#pragma once
// stage_loop: one pipeline stage's training loop: a stage_runner, the batch sampler every stage
// of the pipeline shares (the same stream, the same seed: only activations cross the wire) and
// the learning-rate schedule over the stage's step count. The one loop of a stage, wherever it
// runs: a pipeline job's stage trains its steps with train() (then gathers or closes); a DiPaCo
// path cut into stages is a path_worker per stage whose loop is this one (train/stage_worker.hpp,
// through run / step_count / rebind), so its optimizer state, auxiliary head and step count carry
// on across rounds while the store sees each stage as one worker pushing its own modules. A
// stage resumed from its checkpoint (pipeline/stage_file.hpp) seeks to where it stood.
//
//   pipeline::stage_loop<nn::gpt, net::asio_tcp> loop(model, plan, opts, B, T, sched, net, shard,
//                                                      seed);
//   auto s = loop.train(a, adamw, steps, after_step);  // steps step_count()+1 … steps, drained
//   loop.runner().gather(a);                           // the whole model on stage 0

#include <cstdint>
#include <functional>
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

  // One step of this stage on the next batch at the schedule's rate. Returns its loss (this
  // stage's own in local mode; NaN on all but the last stage under global backprop), or the
  // step's error (a lost or silent neighbour: its deadline).
  result<double> step(arena<host>& a, const optim::adamw& opt) {
    sampler_.next(x_.data(), y_.data());
    ++step_;
    return run_->step(a, opt, sched_.lr_at(step_), x_.data(), y_.data());
  }

  // n steps. Returns their mean loss, 0 when n = 0. Throws error_exception with a step's error.
  double run(arena<host>& a, const optim::adamw& opt, int n) {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      auto l = step(a, opt);
      if (!l) throw error_exception(l.error());
      sum += *l;
    }
    return n ? sum / n : 0.0;
  }

  // Steps step_count() + 1 … last, after_step(t, loss) after each (an error it returns — a
  // checkpoint that could not be written — ends the loop with it), then drain(): the stage
  // returns once its last activation left. Ensures: ok, or the first error.
  status train(arena<host>& a, const optim::adamw& opt, long last,
               const std::function<status(long, double)>& after_step = {}) {
    while (step_ < last) {
      auto l = step(a, opt);
      if (!l) return l.error();
      if (after_step)
        if (auto s = after_step(step_, *l); !s) return s;
    }
    return run_->drain();
  }

  long step_count() const noexcept { return step_; }
  // Where the loop stands (as train::inner_loop's where()).
  struct position {
    long step = 0;
    rng::state_type sampler{};
  };
  position where() const noexcept { return {step_, sampler_.position()}; }
  // Continues from a checkpoint taken at p (every stage of the pipeline at the same step): the
  // runner resumes there (stage_runner::resume_at, sending `in_flight` again) and the sampler
  // draws the batches it would have drawn. Requires: no step taken; the caller restored the
  // stage's planes and head. Errors: resume_at's.
  status seek(const position& p, std::vector<readout_copy> in_flight = {}) {
    if (auto s = run_->resume_at(p.step, std::move(in_flight)); !s) return s;
    step_ = p.step;
    sampler_.seek(p.sampler);
    return {};
  }
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
