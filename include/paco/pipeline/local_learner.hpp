#pragma once
// local_learner: what one stage of a local-loss pipeline (Laskin et al.) does after its forward:
// the stage's own loss (its auxiliary head's on stages 0 … K−2, the model's on the last), the
// backward through its head and its blocks only (truncated at its input: stage 0 still trains
// the embedding), its own gradient-norm clip (over its span and its head) and its own AdamW step.
// The multi-process runner (stage_runner) and the one-process reference (local_reference) both
// call it, so the transport can only move the activations, never change the maths.

#include <cmath>
#include <cstdint>

#include "paco/core/arena.hpp"
#include "paco/core/buffer.hpp"
#include "paco/core/param_layout.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/pipeline/aux_head.hpp"
#include "paco/pipeline/stage.hpp"

namespace paco::pipeline {

// out ← the final norm's θ, then the head's W, of the parameters θ: what a shared_readout head
// reads (aux_head::readout_size() floats). Requires: untied weights.
template <nn::BlockModel M>
void copy_readout(const M& model, const float* theta, float* out) {
  const std::size_t C = model.width(), V = model.vocab();
  out = std::copy(theta + model.off("ln_f"), theta + model.off("ln_f") + 2 * C, out);
  std::copy(theta + model.off("head"), theta + model.off("head") + V * C, out);
}

template <nn::BlockModel M>
class local_learner {
 public:
  // The head of stage st (none on the last stage, nor without with_head: a global-backprop
  // stage), initialised from `seed` and the stage's index.
  local_learner(const M& model, stage<M>& st, head_kind kind, std::uint64_t seed,
                bool with_head = true)
      : model_(model),
        st_(st),
        headed_(with_head && !st.last()),
        head_{.kind = kind,
              .C = model.width(),
              .V = model.vocab(),
              .init_std = model.shape().init_std},
        layout_(make_layout(headed_ ? head_.param_count() : 0)),
        phi_(layout_) {
    if (headed_) {
      rng r(seed * 1000003ULL + std::uint64_t(st.index()) + 1);
      head_.init(phi_.get(plane::param).data(), r);
      mem_.resize(head_.memory_size(st.micro()));
      da_.resize(st.activation_size());
      if (kind == head_kind::shared_readout) readout_.resize(head_.readout_size());
    }
    phi_.zero(plane::grad);
  }

  const aux_head& head() const noexcept { return head_; }
  bool shares_readout() const noexcept {
    return headed_ && head_.kind == head_kind::shared_readout;
  }
  // The auxiliary head's parameters and optimizer state (training only: never exported).
  arena<host>& head_arena() noexcept { return phi_; }
  // shared_readout: the copy of the last stage's final norm and head (ln_f θ, then head W).
  float* readout() noexcept { return readout_.data(); }
  std::size_t readout_size() const noexcept { return head_.readout_size(); }
  // Ensures: the copy holds a's final norm and head (the last stage's, as a holds them).
  void copy_readout(const arena<host>& a) {
    pipeline::copy_readout(model_, a.get(plane::param).data(), readout_.data());
  }

  // After st.forward(0, …) of step t (1-based) on a: the stage's loss, backward, clip and step.
  // Requires: a head (with_head) unless the stage is the last.
  // forward_loss: what forward returned (the last stage's loss). targets: (N). Returns the
  // stage's mean loss (nats per token). Ensures: a's span and the head stepped; nothing else.
  double learn(arena<host>& a, const optim::adamw& opt, float lr, long t,
               const std::int32_t* targets, double forward_loss, float grad_clip) {
    const auto [b, e] = st_.span();
    float* theta = a.get(plane::param).data();
    float* grad = a.get(plane::grad).data();
    std::fill(grad + b, grad + e, 0.0f);
    double loss = forward_loss;
    if (st_.last()) {
      st_.backward(0, theta, grad, nullptr, nullptr);
    } else {
      auto dphi = phi_.get(plane::grad);
      std::fill(dphi.begin(), dphi.end(), 0.0f);
      std::fill(da_.begin(), da_.end(), 0.0f);
      loss = head_.forward_backward(phi_.get(plane::param).data(), dphi.data(), readout_.data(),
                                    st_.output(0), da_.data(), targets, st_.micro(), 1.0f,
                                    mem_.data(), st_.context());
      st_.backward(0, theta, grad, da_.data(), nullptr);
    }
    clip(grad + b, e - b, grad_clip);
    opt.step(a, b, e, t, lr);
    if (!st_.last()) opt.step(phi_, t, lr);
    return loss;
  }

 private:
  static param_layout make_layout(std::size_t n) {
    param_layout l;
    l.add("aux_head", n);
    return l;
  }
  // The global-norm clip of clip_grad_norm over the stage's gradient and then its head's.
  void clip(float* g, std::size_t n, float max_norm) {
    auto dphi = phi_.get(plane::grad);
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
    for (float x : dphi) s += double(x) * x;
    const double norm = std::sqrt(s);
    if (max_norm > 0 && norm > max_norm) {
      const float c = float(max_norm / (norm + 1e-6));
      for (std::size_t i = 0; i < n; ++i) g[i] *= c;
      for (float& x : dphi) x *= c;
    }
  }

  const M& model_;
  stage<M>& st_;
  bool headed_;
  aux_head head_;
  param_layout layout_;
  arena<host> phi_;
  buffer<float> mem_, da_, readout_;
};

}  // namespace paco::pipeline
