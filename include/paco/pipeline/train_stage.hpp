#pragma once
// train_stage: the training loop of one pipeline stage. Every stage samples the same batches
// (the same stream, the same seed: only activations cross the wire) and takes the schedule's
// learning rate at each step; on_step reports each step. Ends with drain(): a stage returns only
// once its last activation has left.
//
//   pipeline::stage_runner run(model, plan, opts, B, T, net, seed);
//   auto s = pipeline::train_stage(run, a, opt, sched, train_stream, B, T, seed, steps);

#include <cstdint>
#include <functional>
#include <vector>

#include "paco/io/batches.hpp"
#include "paco/optim/schedule.hpp"
#include "paco/pipeline/stage_runner.hpp"

namespace paco::pipeline {

// `steps` steps of run on batches of data (batch × ctx, sampled from seed), learning rate
// sched.lr_at(t). on_step(t, loss) after each (loss: as stage_runner::step returns it).
// Requires: data holds more than ctx tokens (checked by the sampler: throws).
// Ensures: ok, or the first error of a step or of the drain (nothing more is sent after it).
// Steps from + 1 … steps of run on batches from `batches` (standing where step `from` left it:
// a resumed run's sampler seeks there, and run.resume_at(from)). after_step(t, loss) after each;
// an error it returns (a checkpoint that could not be written) ends the loop with it.
template <nn::BlockModel M, net::Transport T>
status train_stage(stage_runner<M, T>& run, arena<host>& a, const optim::adamw& opt,
                   const optim::warmup_cosine& sched, io::batch_sampler& batches, int batch,
                   int ctx, long from, long steps,
                   const std::function<status(long, double)>& after_step) {
  std::vector<std::int32_t> x(std::size_t(batch) * ctx), y(x.size());
  for (long t = from + 1; t <= steps; ++t) {
    batches.next(x.data(), y.data());
    auto l = run.step(a, opt, sched.lr_at(t), x.data(), y.data());
    if (!l) return l.error();
    if (after_step)
      if (auto s = after_step(t, *l); !s) return s;
  }
  return run.drain();
}

template <nn::BlockModel M, net::Transport T>
status train_stage(stage_runner<M, T>& run, arena<host>& a, const optim::adamw& opt,
                   const optim::warmup_cosine& sched, const io::token_stream& data, int batch,
                   int ctx, std::uint64_t seed, long steps,
                   const std::function<void(long, double)>& on_step = {}) {
  io::batch_sampler batches(data, batch, ctx, seed);
  return train_stage(run, a, opt, sched, batches, batch, ctx, 0, steps,
                     [&](long t, double l) -> status {
                       if (on_step) on_step(t, l);
                       return {};
                     });
}

}  // namespace paco::pipeline
