#pragma once
// The one-process references a pipeline is checked against (tests) and can be compared with
// (bench/run local):
//   global_reference_step   the model's own forward_backward over the micro-batches in a global
//                           schedule's backward order (gpipe: M−1 … 0; 1f1b: 0 … M−1), the
//                           whole gradient clipped, one AdamW step: what GPipe and 1F1B compute.
//                           Not the stage passes: a second implementation of the same maths.
//   local_reference         every stage of a local-loss pipeline run in turn in one process,
//                           stage 0 … K−1 on step t before step t + 1, the shared readout's copies
//                           applied at the same fixed steps as stage_runner does, each stage's
//                           input passed through the links' activation format.

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/optim/clip.hpp"
#include "paco/pipeline/local_learner.hpp"
#include "paco/pipeline/schedule.hpp"
#include "paco/pipeline/stage.hpp"
#include "paco/pipeline/stage_runner.hpp"

namespace paco::pipeline {

// One optimizer step of global backprop on a batch of `batch` sequences (tokens, targets:
// batch × ctx) cut into M micro-batches, in one process. ws: a workspace of (batch/M, ctx).
// Returns the mean loss (nats per token). Requires: M divides batch; sched gpipe or 1f1b.
template <nn::BlockModel M>
double global_reference_step(const M& model, arena<host>& a, const optim::adamw& opt, float lr,
                             long t, const std::int32_t* tokens, const std::int32_t* targets,
                             int batch, int ctx, schedule sched, int micro, float grad_clip,
                             typename M::workspace& ws) {
  const std::size_t rows = std::size_t(batch / micro) * ctx;
  auto g = a.get(plane::grad);
  std::fill(g.begin(), g.end(), 0.0f);
  double loss = 0;
  for (int i = 0; i < micro; ++i) {
    const int m = sched == schedule::gpipe ? micro - 1 - i : i;
    loss += model.forward_backward(a.get(plane::param).data(), g.data(), tokens + rows * m,
                                   targets + rows * m, ws, 1.0f / float(micro));
  }
  if (grad_clip > 0) optim::clip_grad_norm(g.data(), g.size(), grad_clip);
  opt.step(a, t, lr);
  return loss / micro;
}

template <nn::BlockModel M>
class local_reference {
 public:
  // Requires (checked: throws): as stage_runner's, in local mode.
  local_reference(const M& model, const stage_plan& plan, const pipeline_options& o, int batch,
                  int ctx, std::uint64_t seed)
      : model_(model),
        o_(o),
        codec_(o.activations, std::size_t(batch) * ctx * model.width()),
        in_(codec_.size()) {
    o.validate(batch).throw_if_error();
    for (int k = 0; k < plan.stages(); ++k) {
      stages_.push_back(std::make_unique<stage<M>>(model, plan, k, nn::dims{batch, ctx}, 1));
      learners_.push_back(std::make_unique<local_learner<M>>(model, *stages_.back(), o.head, seed));
    }
  }

  // Step t + 1 of every stage, in stage order, on one arena holding the whole model. Returns
  // each stage's loss (nats per token).
  std::vector<double> step(arena<host>& a, const optim::adamw& opt, float lr,
                           const std::int32_t* tokens, const std::int32_t* targets) {
    const long t = ++t_;
    const int K = int(stages_.size());
    std::vector<double> losses;
    const float* in = nullptr;
    for (int k = 0; k < K; ++k) {
      auto& st = *stages_[std::size_t(k)];
      auto& l = *learners_[std::size_t(k)];
      const double fl = st.forward(0, a.get(plane::param).data(), tokens, in, targets, 1.0f);
      if (l.shares_readout()) {
        if (t == 1) l.copy_readout(a);
        if (const long u = o_.readout_copy_before(t)) {
          PACO_ASSERT(!copies_.empty() && copies_.front().first == u, "readout copy missing");
          std::copy(copies_.front().second.begin(), copies_.front().second.end(), l.readout());
          if (k + 2 == K) copies_.pop_front();  // every stage that shares has taken it
        }
      }
      losses.push_back(l.learn(a, opt, lr, t, targets, fl, o_.grad_clip));
      if (k + 1 < K) {  // what the next stage receives: the output through the link's format
        codec_.round_trip(st.output(0), in_.data()).throw_if_error();
        in = in_.data();
      }
    }
    if (K > 1 && o_.head == head_kind::shared_readout && t % o_.readout_refresh == 0) {
      std::vector<float> c(learners_.front()->readout_size());
      copy_readout(model_, a.get(plane::param).data(), c.data());
      copies_.emplace_back(t, std::move(c));
    }
    return losses;
  }

  local_learner<M>& learner(int k) { return *learners_[std::size_t(k)]; }

 private:
  const M& model_;
  pipeline_options o_;
  activation_codec codec_;
  std::vector<float> in_;
  long t_ = 0;
  std::vector<std::unique_ptr<stage<M>>> stages_;
  std::vector<std::unique_ptr<local_learner<M>>> learners_;
  std::deque<std::pair<long, std::vector<float>>> copies_;
};

}  // namespace paco::pipeline
