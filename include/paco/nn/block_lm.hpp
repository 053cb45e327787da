#pragma once
// block_lm<Block>: a byte/token language model over any block a user composes from nn modules.
//   tokens (B,T) → embedding → n × Block → layer_norm → lm_head → logits (B,T,V)
// Block is any Module of width d → d (e.g. nn::transformer_block, or a block of one's own:
// seq<residual<…>, …>). Parameters live in an arena laid out by layout(): one entry per part
// ("embed", "block.0", …, "ln_f", "head"), so each block's span is contiguous and DiPaCo levels
// (path/level_map.hpp: split_gpt_levels) group these entries. Models nn::LanguageModel: the
// inner loop, the workers, the trainers, routing features and the one scorer take it as they take
// nn::gpt (which is block_lm<transformer_block> with GPT-2 tensor names).
//
//   using my_block = nn::seq<nn::attention_block, nn::attention_block, nn::mlp_block>;
//   nn::block_lm<my_block> model({.vocab = 256, .ctx = 128, .d = 64}, my_block(…), 3);

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/nn/cross_entropy.hpp"
#include "paco/nn/dispatch.hpp"
#include "paco/nn/embedding.hpp"
#include "paco/nn/layer_norm.hpp"
#include "paco/nn/lm_head.hpp"

namespace paco::nn {

// The parts of a block_lm around its blocks.
struct lm_shape {
  int vocab = 256;  // bytes
  int ctx = 256;    // maximum sequence length
  int d = 256;      // channels (every block's width)
  bool tie_weights = false;
  float init_std = 0.02f;

  // Ensures: ok() iff every field is in its accepted range; the error names the field as
  // owner.field (e.g. gpt_config.ctx for a gpt's).
  status validate(const char* owner = "lm_shape") const {
    auto bad = [owner](const char* f, const std::string& why) {
      return status(errc::invalid_argument, std::string(owner) + "." + f + " " + why);
    };
    if (vocab < 2 || vocab > 1 << 20) return bad("vocab", "must be in [2, 2^20]");
    if (ctx < 1 || ctx > 1 << 16) return bad("ctx", "must be in [1, 65536]");
    if (d < 1 || d > 1 << 16) return bad("d", "must be in [1, 65536]");
    if (!(init_std > 0 && init_std < 1)) return bad("init_std", "must be in (0, 1)");
    return {};
  }
};

template <Module Block>
class block_lm {
 public:
  using model_tag = void;  // models nn::Model (and nn::LanguageModel)
  using block_type = Block;

  // Requires (checked: throws error_exception naming the problem): s valid, blocks in
  // [0, 1024], block of width s.d in and out.
  block_lm(lm_shape s, Block block, int blocks)
      : shape_(s), blocks_(blocks), block_(std::move(block)) {
    s.validate().throw_if_error();
    if (blocks < 0 || blocks > 1024)
      throw error_exception({errc::invalid_argument, "block_lm: blocks must be in [0, 1024]"});
    if (block_.in_width() != s.d || block_.out_width() != s.d)
      throw error_exception({errc::invalid_argument,
                             "block_lm: the block maps width " + std::to_string(block_.in_width()) +
                                 " to " + std::to_string(block_.out_width()) +
                                 ", the model's d is " + std::to_string(s.d)});
    embed_ = {.V = s.vocab, .ctx = s.ctx, .C = s.d, .init_std = s.init_std};
    ln_f_ = {.C = s.d};
    head_ = {.C = s.d, .V = s.vocab, .tied = s.tie_weights, .init_std = s.init_std};
    layout_.add("embed", embed_.param_count());
    for (int l = 0; l < blocks; ++l) layout_.add(block_name(l), block_.param_count());
    layout_.add("ln_f", ln_f_.param_count());
    if (!s.tie_weights) layout_.add("head", head_.param_count());
  }

  const lm_shape& shape() const noexcept { return shape_; }
  int vocab() const noexcept { return shape_.vocab; }
  int width() const noexcept { return shape_.d; }
  int blocks() const noexcept { return blocks_; }
  const Block& block() const noexcept { return block_; }
  // The parts around the blocks, for passes that run a range of the model (pipeline/stage.hpp):
  // the token + position embedding, the final norm and the head (untied: its own entry "head").
  const embedding& embedding_part() const noexcept { return embed_; }
  const layer_norm& final_norm() const noexcept { return ln_f_; }
  const lm_head& head_part() const noexcept { return head_; }
  const param_layout& layout() const noexcept { return layout_; }
  // Parameters in use (no padding).
  std::size_t param_count() const noexcept { return layout_.used(); }

  // Ensures: plane::param of `a` holds a fresh initialisation from `seed` (same seed, same θ).
  void init(arena<host>& a, std::uint64_t seed) const {
    rng r(seed);
    auto theta = a.get(plane::param);
    std::fill(theta.begin(), theta.end(), 0.0f);
    embed_.init(theta.data() + off("embed"), r);
    for (int l = 0; l < blocks_; ++l) block_.init(theta.data() + off(block_name(l)), r);
    ln_f_.init(theta.data() + off("ln_f"), r);
    if (!shape_.tie_weights) head_.init(theta.data() + off("head"), r);
  }

  // The memory one forward/backward of batch shape d works in, as pointers: a host workspace
  // (below) or a device one (kernels/paco/nn/lm_cuda.cuh) lends its buffers through this, so
  // both backends run the same pass. Sizes in elements: cache cache_size(d), logits N·V,
  // grad_a and grad_b N·C each.
  struct pass_memory {
    float* cache;
    float* logits;
    float* grad_a;
    float* grad_b;
  };
  // cache: embed out, n × (block cache, block out), ln_f cache + out.
  std::size_t cache_size(dims d) const {
    const std::size_t N = d.rows(), C = shape_.d;
    return N * C * (blocks_ + 2) + blocks_ * block_.cache_size(d) + ln_f_.cache_size(d);
  }
  // Scratch a context needs for a pass of shape d.
  std::size_t scratch_bytes(dims d) const {
    return std::max(block_.scratch_bytes(d), ln_f_.scratch_bytes(d)) + 4096;
  }

  // Per-thread memory for batches of shape d: caches, activations, logits, scratch.
  struct workspace {
    dims d;
    buffer<float> cache;
    buffer<float> logits;          // (N,V); also dlogits
    buffer<float> grad_a, grad_b;  // (N,C) gradient ping-pong between blocks
    context ctx;
    pass_memory memory() { return {cache.data(), logits.data(), grad_a.data(), grad_b.data()}; }
  };
  workspace make_workspace(dims d) const {
    workspace w;
    w.d = d;
    const std::size_t N = d.rows(), C = shape_.d;
    w.cache.resize(cache_size(d));
    w.logits.resize(N * shape_.vocab);
    w.grad_a.resize(N * C);
    w.grad_b.resize(N * C);
    w.ctx.reserve(scratch_bytes(d));
    return w;
  }

  // Forward pass. Writes logits (N,V) into w.logits. Requires: tokens (B,T) with T ≤ ctx.
  void forward(const float* theta, const std::int32_t* tokens, workspace& w) const {
    forward(theta, tokens, w.memory(), w.d, w.ctx);
  }

  // The logits (N, V) of the latest forward() on w.
  const float* logits(const workspace& w) const { return w.logits.data(); }
  // The last block's output a_n (N, C) of the latest forward() on w (before ln_f): the hidden
  // states DiPaCo's router features average.
  const float* hidden(const workspace& w) const { return hidden(w.cache.data(), w.d); }
  const float* hidden(const float* cache, dims d) const {
    return cache + std::size_t(d.rows()) * shape_.d * blocks_;
  }

  // Mean cross-entropy (nats per token) of next-token targets (B,T).
  double loss(const float* theta, const std::int32_t* tokens, const std::int32_t* targets,
              workspace& w) const {
    forward(theta, tokens, w);
    return loss_and_grad(w.ctx, w.logits.data(), targets, nullptr, w.d.rows(), shape_.vocab);
  }

  // Forward + backward. ACCUMULATES ∇θ of (scale · mean loss) into grad (a full plane).
  // Returns the mean loss.
  double forward_backward(const float* theta, float* grad, const std::int32_t* tokens,
                          const std::int32_t* targets, workspace& w, float scale = 1.0f) const {
    return forward_backward(theta, grad, tokens, targets, w.memory(), w.d, w.ctx, scale);
  }

  // The passes on any backend: θ, grad, tokens, targets and m's buffers live where ctx computes.
  template <class Ctx>
  void forward(const float* theta, const std::int32_t* tokens, pass_memory m, dims d,
               Ctx& ctx) const {
    const std::size_t N = d.rows(), C = shape_.d;
    float* x = m.cache;  // (N,C) activations then caches
    module_forward(embed_, theta + off("embed"), tokens, x, static_cast<float*>(nullptr), d, ctx);
    float* cache = m.cache + N * C * (blocks_ + 2);
    for (int l = 0; l < blocks_; ++l) {
      float* y = x + N * C;
      module_forward(block_, theta + off(block_name(l)), x, y, cache, d, ctx);
      cache += block_.cache_size(d);
      x = y;
    }
    float* xf = x + N * C;
    module_forward(ln_f_, theta + off("ln_f"), static_cast<const float*>(x), xf, cache, d, ctx);
    module_forward(head_, head_theta(theta), static_cast<const float*>(xf), m.logits,
                   static_cast<float*>(nullptr), d, ctx);
  }

  template <class Ctx>
  double forward_backward(const float* theta, float* grad, const std::int32_t* tokens,
                          const std::int32_t* targets, pass_memory m, dims d, Ctx& ctx,
                          float scale = 1.0f) const {
    forward(theta, tokens, m, d, ctx);
    const std::size_t N = d.rows(), C = shape_.d;
    float* logits = m.logits;
    double l = loss_and_grad(ctx, logits, targets, logits, d.rows(), shape_.vocab, scale);
    float* xs = m.cache;  // activations a_0 … a_n, then ln_f output
    const float* xL = xs + N * C * blocks_;
    const float* xf = xL + N * C;
    const float* cache_f = xs + N * C * (blocks_ + 2) + blocks_ * block_.cache_size(d);
    float* g = m.grad_a;
    float* g2 = m.grad_b;
    zero(ctx, g2, N * C);
    module_backward(head_, head_theta(theta), xf, static_cast<const float*>(logits), g2,
                    grad_head(grad), static_cast<const float*>(nullptr), d, ctx);
    zero(ctx, g, N * C);
    module_backward(ln_f_, theta + off("ln_f"), xL, static_cast<const float*>(g2), g,
                    grad + off("ln_f"), cache_f, d, ctx);
    for (int l = blocks_ - 1; l >= 0; --l) {
      const float* x = xs + N * C * l;
      const float* cache = xs + N * C * (blocks_ + 2) + l * block_.cache_size(d);
      zero(ctx, g2, N * C);
      module_backward(block_, theta + off(block_name(l)), x, static_cast<const float*>(g), g2,
                      grad + off(block_name(l)), cache, d, ctx);
      std::swap(g, g2);
    }
    module_backward(embed_, theta + off("embed"), tokens, static_cast<const float*>(g),
                    static_cast<float*>(nullptr), grad + off("embed"),
                    static_cast<const float*>(nullptr), d, ctx);
    return l;
  }

  // Every parameter tensor with its offset in a plane and its shape: the embedding tables, each
  // block as one flat tensor "block.l" (its own modules' order), the final norm and the head.
  std::vector<named_tensor> tensors() const {
    const std::size_t C = shape_.d, V = shape_.vocab;
    std::vector<named_tensor> t;
    t.push_back({"wte.weight", off("embed"), {V, C}});
    t.push_back({"wpe.weight", off("embed") + V * C, {std::size_t(shape_.ctx), C}});
    for (int l = 0; l < blocks_; ++l)
      t.push_back({block_name(l), off(block_name(l)), {block_.param_count()}});
    t.push_back({"ln_f.weight", off("ln_f"), {C}});
    t.push_back({"ln_f.bias", off("ln_f") + C, {C}});
    if (!shape_.tie_weights) t.push_back({"lm_head.weight", off("head"), {V, C}});
    return t;
  }

  // Elements from the start of a plane to layout entry `name` ("embed", "block.l", …).
  // Requires: the entry exists.
  std::size_t off(const std::string& name) const {
    return layout_.entry(*layout_.find(name)).offset;
  }
  static std::string block_name(int l) { return "block." + std::to_string(l); }

 private:
  const float* head_theta(const float* theta) const {
    return theta + (shape_.tie_weights ? off("embed") : off("head"));
  }
  float* grad_head(float* grad) const {
    return grad + (shape_.tie_weights ? off("embed") : off("head"));
  }

  lm_shape shape_;
  int blocks_ = 0;
  Block block_;
  embedding embed_;
  layer_norm ln_f_;
  lm_head head_;
  param_layout layout_;
};

}  // namespace paco::nn
