#pragma once
// learner_cuda: a replica on the device as the round loop's learner (train::Learner) — an arena
// in device memory and the device inner loop that trains it, H steps a round. With
// round_planes<cuda, O> (round_planes_cuda.cuh) train::round_loop runs every sync rule with the
// replica on the device.
//
//   kernels::inner_loop_cuda<nn::gpt> loop(model, cfg, shard, seed);
//   arena<cuda> a(model.layout());
//   upload(init, a, plane::param, loop.workspace().ctx.stream());
//   kernels::learner_cuda<nn::gpt> l(loop, a, optim::adamw{.lr = 3e-3f}, H);
//   train::round_loop<net::inproc, kernels::learner_cuda<nn::gpt>, outer::nesterov,
//                     train::blocking> r(t, l, outer::nesterov{});
#include "paco/arena_cuda.cuh"
#include "paco/context_cuda.cuh"
#include "paco/inner_loop_cuda.cuh"
#include "paco/optim/adamw.hpp"

namespace paco::kernels {

template <class M>
class learner_cuda {
 public:
  // Requires: loop and a outlive the learner; loop trains a's model; H ≥ 1.
  learner_cuda(inner_loop_cuda<M>& loop, arena<cuda>& a, optim::adamw opt, int H)
      : loop_(&loop), a_(&a), opt_(opt), h_(H) {}

  arena<cuda>& state() noexcept { return *a_; }
  // n inner steps; their mean loss. Throws error_exception naming a failed CUDA call.
  double train(int n) { return loop_->run(*a_, opt_, n); }
  int steps_per_round() const noexcept { return h_; }
  // The stream the inner steps run on (the round's plane work is ordered on it).
  cuda_context& context() noexcept { return loop_->workspace().ctx; }
  inner_loop_cuda<M>& loop() noexcept { return *loop_; }

 private:
  inner_loop_cuda<M>* loop_;
  arena<cuda>* a_;
  optim::adamw opt_;
  int h_;
};

}  // namespace paco::kernels
