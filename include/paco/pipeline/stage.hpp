#pragma once
// stage<Model>: the passes of one pipeline stage, a contiguous range of a BlockModel (stage_plan):
// stage 0 embeds tokens, every stage runs its blocks, the last one its final norm, head and loss.
// Micro-batches live in `slots` (the schedule's stash): forward keeps a slot's activations and
// caches until its backward. The passes make exactly the calls block_lm's forward_backward makes,
// in the same order, so a pipeline is bit-identical to one process that accumulates the same
// micro-batches in the same order (tests/pipeline). Single-threaded: one stage, one core.
//
//   pipeline::stage st(model, plan, k, {.B = 2, .T = 256}, /*slots=*/1);
//   st.forward(0, theta, tokens, x, targets, 1.0f);   // x: the previous stage's output
//   st.backward(0, theta, grad, dy, dx);              // dy: ∂/∂output from the next stage

#include <cstddef>
#include <cstdint>
#include <vector>

#include "paco/core/buffer.hpp"
#include "paco/core/error.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/nn/context.hpp"
#include "paco/nn/dispatch.hpp"
#include "paco/nn/gemm.hpp"
#include "paco/pipeline/stage_plan.hpp"

namespace paco::pipeline {

template <nn::BlockModel M>
class stage {
 public:
  // Requires (checked: throws error_exception naming the problem): plan valid for the model,
  // 0 ≤ k < plan.stages(), untied weights, slots ≥ 1.
  stage(const M& model, const stage_plan& plan, int k, nn::dims micro, int slots)
      : model_(model), k_(k), K_(plan.stages()), b0_(0), b1_(0), d_(micro) {
    plan.validate(model.blocks()).throw_if_error();
    if (k < 0 || k >= K_)
      throw error_exception(
          {errc::invalid_argument,
           "pipeline: stage " + std::to_string(k) + " of a " + std::to_string(K_) + "-stage plan"});
    if (model.shape().tie_weights && K_ > 1)
      throw error_exception(
          {errc::invalid_argument,
           "pipeline: tied weights cannot be cut into stages (the head on the last stage would "
           "share the first stage's embedding); set tie_weights = false"});
    if (slots < 1) throw error_exception({errc::invalid_argument, "pipeline: slots must be >= 1"});
    nn::gemm_single_threaded();  // one stage, one core
    b0_ = plan.begin_block(k);
    b1_ = plan.end_block(k);
    span_ = param_span(model, plan, k);
    const std::size_t N = d_.rows(), C = model.width(), nb = std::size_t(b1_ - b0_);
    const std::size_t per_slot =
        N * C * (nb + 1) + nb * model.block().cache_size(d_) +
        (last() ? N * C + model.final_norm().cache_size(d_) + N * std::size_t(model.vocab()) : 0);
    for (int s = 0; s < slots; ++s) {
      slots_.emplace_back(per_slot);
      tokens_.emplace_back(first() ? N : 0);
    }
    ga_.resize(N * C);
    gb_.resize(N * C);
    std::size_t scratch = model.block().scratch_bytes(d_);
    if (last()) scratch = std::max(scratch, model.final_norm().scratch_bytes(d_));
    ctx_.reserve(scratch + 4096);
  }

  int index() const noexcept { return k_; }
  int stages() const noexcept { return K_; }
  bool first() const noexcept { return k_ == 0; }
  bool last() const noexcept { return k_ + 1 == K_; }
  int slots() const noexcept { return int(slots_.size()); }
  nn::dims micro() const noexcept { return d_; }
  // The elements [begin, end) of a plane this stage owns.
  std::pair<std::size_t, std::size_t> span() const noexcept { return span_; }
  // Floats in one activation (N, C) between stages.
  std::size_t activation_size() const noexcept { return std::size_t(d_.rows()) * model_.width(); }
  nn::context& context() noexcept { return ctx_; }

  // Forward of one micro-batch into `slot`: stage 0 from tokens (N), the others from x (N, C),
  // copied into the slot. The last stage then computes the loss against targets (N) and keeps
  // ∂(scale · mean loss)/∂logits for backward; it returns the mean loss (nats per token), the
  // others return 0. Ensures: output(slot) holds the stage's output (N, C) (non-last).
  double forward(int slot, const float* theta, const std::int32_t* tokens, const float* x,
                 const std::int32_t* targets, float scale) {
    const std::size_t N = d_.rows(), C = model_.width();
    float* in = slot_ptr(slot);
    if (first()) {
      std::copy(tokens, tokens + N, tokens_[std::size_t(slot)].begin());
      module_forward(model_.embedding_part(), theta + model_.off("embed"), tokens, in,
                     static_cast<float*>(nullptr), d_, ctx_);
    } else {
      std::copy(x, x + N * C, in);
    }
    float* cur = in;
    float* cache = caches(slot);
    for (int l = b0_; l < b1_; ++l) {
      float* y = cur + N * C;
      module_forward(model_.block(), theta + model_.off(M::block_name(l)),
                     static_cast<const float*>(cur), y, cache, d_, ctx_);
      cache += model_.block().cache_size(d_);
      cur = y;
    }
    if (!last()) return 0.0;
    float* xf = cache;  // after the blocks' caches: ln_f output, ln_f cache, logits
    float* cache_f = xf + N * C;
    float* logits = cache_f + model_.final_norm().cache_size(d_);
    module_forward(model_.final_norm(), theta + model_.off("ln_f"), static_cast<const float*>(cur),
                   xf, cache_f, d_, ctx_);
    module_forward(model_.head_part(), theta + model_.off("head"), static_cast<const float*>(xf),
                   logits, static_cast<float*>(nullptr), d_, ctx_);
    return nn::loss_and_grad(ctx_, logits, targets, logits, d_.rows(), model_.vocab(), scale);
  }

  // The output activation (N, C) of the latest forward into `slot`.
  const float* output(int slot) const {
    return const_cast<stage*>(this)->slot_ptr(slot) +
           std::size_t(d_.rows()) * model_.width() * std::size_t(b1_ - b0_);
  }

  // Backward of `slot`'s micro-batch. dy: ∂/∂output (N, C) from the next stage, or from an
  // auxiliary head (ignored by the last stage, which starts from its own loss). ACCUMULATES ∇θ
  // into grad (a full plane, this stage's span). Writes ∂/∂input into dx (N, C) when dx is
  // non-null and the stage is not the first; stage 0 ends in the embedding's gradient.
  void backward(int slot, const float* theta, float* grad, const float* dy, float* dx) {
    const std::size_t N = d_.rows(), C = model_.width(), nb = std::size_t(b1_ - b0_);
    const float* xs = slot_ptr(slot);  // input, then each block's output
    float* bufs[2] = {ga_.data(), gb_.data()};
    int next = 0;  // the buffer the next ∂/∂input goes to
    const float* dout = dy;
    if (last()) {
      float* cache = caches(slot) + nb * model_.block().cache_size(d_);
      const float* xf = cache;
      const float* cache_f = xf + N * C;
      const float* logits = cache_f + model_.final_norm().cache_size(d_);
      const float* xL = xs + N * C * nb;
      nn::zero(ctx_, gb_.data(), N * C);
      module_backward(model_.head_part(), theta + model_.off("head"), xf, logits, gb_.data(),
                      grad + model_.off("head"), static_cast<const float*>(nullptr), d_, ctx_);
      nn::zero(ctx_, ga_.data(), N * C);
      module_backward(model_.final_norm(), theta + model_.off("ln_f"), xL,
                      static_cast<const float*>(gb_.data()), ga_.data(), grad + model_.off("ln_f"),
                      cache_f, d_, ctx_);
      dout = ga_.data();
      next = 1;
    }
    for (int l = b1_ - 1; l >= b0_; --l) {
      const std::size_t i = std::size_t(l - b0_);
      const float* x = xs + N * C * i;
      const float* cache = caches(slot) + i * model_.block().cache_size(d_);
      float* din = bufs[next];
      nn::zero(ctx_, din, N * C);
      module_backward(model_.block(), theta + model_.off(M::block_name(l)), x, dout, din,
                      grad + model_.off(M::block_name(l)), cache, d_, ctx_);
      dout = din;
      next ^= 1;
    }
    if (first()) {
      module_backward(model_.embedding_part(), theta + model_.off("embed"),
                      static_cast<const std::int32_t*>(tokens_[std::size_t(slot)].data()), dout,
                      static_cast<float*>(nullptr), grad + model_.off("embed"),
                      static_cast<const float*>(nullptr), d_, ctx_);
    } else if (dx) {
      std::copy(dout, dout + N * C, dx);
    }
  }

 private:
  float* slot_ptr(int slot) { return slots_[std::size_t(slot)].data(); }
  float* caches(int slot) {
    const std::size_t N = d_.rows(), C = model_.width();
    return slot_ptr(slot) + N * C * std::size_t(b1_ - b0_ + 1);
  }

  const M& model_;
  int k_, K_, b0_, b1_;
  nn::dims d_;
  std::pair<std::size_t, std::size_t> span_;
  std::vector<buffer<float>> slots_;  // input, block outputs, block caches (+ last: ln_f, logits)
  std::vector<std::vector<std::int32_t>> tokens_;  // stage 0: each slot's tokens (embed backward)
  buffer<float> ga_, gb_;
  nn::context ctx_;
};

}  // namespace paco::pipeline
