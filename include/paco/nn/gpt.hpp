#pragma once
// gpt: a GPT-2 style byte-level language model composed from paco's pure modules.
//   tokens (B,T) → embedding → L × block → layer_norm → lm_head → logits (B,T,V)
//   block = residual(layer_norm → causal_attention) → residual(layer_norm → mlp)
// Parameters live in an arena laid out by layout(): one entry per module ("embed", "block.0",
// …, "ln_f", "head"), so each block's span is contiguous (DiPaCo levels group these entries).

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/nn/causal_attention.hpp"
#include "paco/nn/cross_entropy.hpp"
#include "paco/nn/embedding.hpp"
#include "paco/nn/gelu.hpp"
#include "paco/nn/layer_norm.hpp"
#include "paco/nn/linear.hpp"
#include "paco/nn/lm_head.hpp"
#include "paco/nn/residual.hpp"
#include "paco/nn/seq.hpp"
#include "paco/train/concepts.hpp"

namespace paco::nn {

using mlp = seq<linear, gelu, linear>;
using attention_block = residual<seq<layer_norm, causal_attention>>;
using mlp_block = residual<seq<layer_norm, mlp>>;
using transformer_block = seq<attention_block, mlp_block>;

// A transformer block of width C, NH heads, MLP hidden width H. proj_std initialises the two
// output projections (GPT-2: 0.02/√(2·layers)).
inline transformer_block make_block(int C, int NH, int H, float init_std, float proj_std) {
  attention_block a{seq<layer_norm, causal_attention>(
      layer_norm{.C = C},
      causal_attention{.C = C, .NH = NH, .init_std = init_std, .proj_init_std = proj_std})};
  mlp m(linear{.in = C, .out = H, .init_std = init_std}, gelu{.C = H},
        linear{.in = H, .out = C, .init_std = proj_std});
  mlp_block b{seq<layer_norm, mlp>(layer_norm{.C = C}, std::move(m))};
  return transformer_block(std::move(a), std::move(b));
}

struct gpt_config {
  int vocab = 256;  // bytes
  int ctx = 256;    // maximum sequence length
  int d = 256;      // channels
  int layers = 4;
  int heads = 4;
  int mlp_mult = 4;  // MLP hidden = mlp_mult · d
  bool tie_weights = false;
  float init_std = 0.02f;

  // Ensures: ok() iff every field is in its accepted range; the error names the field.
  status validate() const {
    auto bad = [](const char* f, const std::string& why) {
      return status(errc::invalid_argument, std::string("gpt_config.") + f + " " + why);
    };
    if (vocab < 2 || vocab > 1 << 20) return bad("vocab", "must be in [2, 2^20]");
    if (ctx < 1 || ctx > 1 << 16) return bad("ctx", "must be in [1, 65536]");
    if (d < 1 || d > 1 << 16) return bad("d", "must be in [1, 65536]");
    if (layers < 0 || layers > 1024) return bad("layers", "must be in [0, 1024]");
    if (heads < 1 || d % heads != 0)
      return bad("heads", "must be ≥ 1 and divide d = " + std::to_string(d));
    if (mlp_mult < 1 || mlp_mult > 64) return bad("mlp_mult", "must be in [1, 64]");
    if (!(init_std > 0 && init_std < 1)) return bad("init_std", "must be in (0, 1)");
    return {};
  }
};

class gpt {
 public:
  using model_tag = void;  // models train::Model

  // Requires: cfg.validate().ok() (checked: throws error_exception otherwise).
  explicit gpt(gpt_config cfg) : cfg_(cfg) {
    cfg.validate().throw_if_error();
    const float proj = cfg.init_std / std::sqrt(2.0f * float(std::max(cfg.layers, 1)));
    embed_ = {.V = cfg.vocab, .ctx = cfg.ctx, .C = cfg.d, .init_std = cfg.init_std};
    block_ = make_block(cfg.d, cfg.heads, cfg.mlp_mult * cfg.d, cfg.init_std, proj);
    ln_f_ = {.C = cfg.d};
    head_ = {.C = cfg.d, .V = cfg.vocab, .tied = cfg.tie_weights, .init_std = cfg.init_std};
    layout_.add("embed", embed_.param_count());
    for (int l = 0; l < cfg.layers; ++l)
      layout_.add("block." + std::to_string(l), block_.param_count());
    layout_.add("ln_f", ln_f_.param_count());
    if (!cfg.tie_weights) layout_.add("head", head_.param_count());
  }

  const gpt_config& config() const noexcept { return cfg_; }
  const param_layout& layout() const noexcept { return layout_; }
  // Parameters in use (no padding).
  std::size_t param_count() const noexcept { return layout_.used(); }

  // Ensures: plane::param of `a` holds a fresh initialisation from `seed` (same seed, same θ).
  void init(arena<host>& a, std::uint64_t seed) const {
    rng r(seed);
    auto theta = a.get(plane::param);
    std::fill(theta.begin(), theta.end(), 0.0f);
    embed_.init(ptr(theta.data(), "embed"), r);
    for (int l = 0; l < cfg_.layers; ++l) block_.init(ptr(theta.data(), block_name(l)), r);
    ln_f_.init(ptr(theta.data(), "ln_f"), r);
    if (!cfg_.tie_weights) head_.init(ptr(theta.data(), "head"), r);
  }

  // Per-thread memory for batches of shape d: caches, activations, logits, scratch.
  struct workspace {
    dims d;
    buffer<float> cache;           // embed out, L × (block cache, block out), ln_f cache + out
    buffer<float> logits;          // (N,V); also dlogits
    buffer<float> grad_a, grad_b;  // (N,C) gradient ping-pong between blocks
    context ctx;
  };
  workspace make_workspace(dims d) const {
    workspace w;
    w.d = d;
    const std::size_t N = d.rows(), C = cfg_.d;
    w.cache.resize(N * C * (cfg_.layers + 2) + cfg_.layers * block_.cache_size(d) +
                   ln_f_.cache_size(d));
    w.logits.resize(N * cfg_.vocab);
    w.grad_a.resize(N * C);
    w.grad_b.resize(N * C);
    w.ctx.reserve(std::max(block_.scratch_bytes(d), ln_f_.scratch_bytes(d)) + 4096);
    return w;
  }

  // Forward pass. Writes logits (N,V) into w.logits. Requires: tokens (B,T) with T ≤ ctx.
  void forward(const float* theta, const std::int32_t* tokens, workspace& w) const {
    const dims d = w.d;
    const std::size_t N = d.rows(), C = cfg_.d;
    float* x = w.cache.data();  // (N,C) activations then caches
    embed_.forward(theta + off("embed"), tokens, x, static_cast<float*>(nullptr), d, w.ctx);
    float* cache = w.cache.data() + N * C * (cfg_.layers + 2);
    for (int l = 0; l < cfg_.layers; ++l) {
      float* y = x + N * C;
      block_.forward(theta + off(block_name(l)), x, y, cache, d, w.ctx);
      cache += block_.cache_size(d);
      x = y;
    }
    float* xf = x + N * C;
    ln_f_.forward(theta + off("ln_f"), x, xf, cache, d, w.ctx);
    head_.forward(head_theta(theta), xf, w.logits.data(), static_cast<float*>(nullptr), d, w.ctx);
  }

  // The last block's output a_L (N, C) of the latest forward() on w (before ln_f): the hidden
  // states DiPaCo's router features average.
  const float* hidden(const workspace& w) const {
    return w.cache.data() + std::size_t(w.d.rows()) * cfg_.d * cfg_.layers;
  }

  // Mean cross-entropy (nats per token) of next-token targets (B,T).
  double loss(const float* theta, const std::int32_t* tokens, const std::int32_t* targets,
              workspace& w) const {
    forward(theta, tokens, w);
    return cross_entropy<float>(w.logits.data(), targets, nullptr, w.d.rows(), cfg_.vocab);
  }

  // Forward + backward. ACCUMULATES ∇θ of (scale · mean loss) into grad (a full plane).
  // Returns the mean loss. Cost: ≈ 6·params·N + 12·layers·N·T·d flops.
  double forward_backward(const float* theta, float* grad, const std::int32_t* tokens,
                          const std::int32_t* targets, workspace& w, float scale = 1.0f) const {
    forward(theta, tokens, w);
    const dims d = w.d;
    const std::size_t N = d.rows(), C = cfg_.d;
    float* logits = w.logits.data();
    double l = cross_entropy<float>(logits, targets, logits, d.rows(), cfg_.vocab, scale);
    float* xs = w.cache.data();  // activations a_0 … a_L, then ln_f output
    const float* xL = xs + N * C * cfg_.layers;
    const float* xf = xL + N * C;
    const float* cache_f = xs + N * C * (cfg_.layers + 2) + cfg_.layers * block_.cache_size(d);
    float* g = w.grad_a.data();
    float* g2 = w.grad_b.data();
    std::fill(g2, g2 + N * C, 0.0f);
    head_.backward(head_theta(theta), xf, logits, g2, grad_head(grad), static_cast<float*>(nullptr),
                   d, w.ctx);
    std::fill(g, g + N * C, 0.0f);
    ln_f_.backward(theta + off("ln_f"), xL, g2, g, grad + off("ln_f"), cache_f, d, w.ctx);
    for (int l = cfg_.layers - 1; l >= 0; --l) {
      const float* x = xs + N * C * l;
      const float* cache = xs + N * C * (cfg_.layers + 2) + l * block_.cache_size(d);
      std::fill(g2, g2 + N * C, 0.0f);
      block_.backward(theta + off(block_name(l)), x, g, g2, grad + off(block_name(l)), cache, d,
                      w.ctx);
      std::swap(g, g2);
    }
    embed_.backward(theta + off("embed"), tokens, g, static_cast<float*>(nullptr),
                    grad + off("embed"), static_cast<const float*>(nullptr), d, w.ctx);
    return l;
  }

  // Model FLOPs per token of a training step, counted as 6·params + 12·layers·T·d (fwd + bwd,
  // full attention): the same count is used for any peer.
  double train_flops_per_token(int T) const {
    return 6.0 * double(param_count()) + 12.0 * cfg_.layers * double(T) * cfg_.d;
  }

  // Every parameter tensor with a PyTorch-style name, its offset in a plane and its shape.
  std::vector<named_tensor> tensors() const {
    std::vector<named_tensor> t;
    const std::size_t C = cfg_.d, V = cfg_.vocab, H = std::size_t(cfg_.mlp_mult) * C;
    std::size_t o = off("embed");
    t.push_back({"wte.weight", o, {V, C}});
    t.push_back({"wpe.weight", o + V * C, {std::size_t(cfg_.ctx), C}});
    for (int l = 0; l < cfg_.layers; ++l) {
      std::string p = "h." + std::to_string(l) + ".";
      o = off(block_name(l));
      auto add = [&](std::string n, std::vector<std::size_t> shape) {
        named_tensor nt{p + n, o, shape};
        o += nt.size();
        t.push_back(std::move(nt));
      };
      add("ln_1.weight", {C});
      add("ln_1.bias", {C});
      add("attn.c_attn.weight", {3 * C, C});
      add("attn.c_attn.bias", {3 * C});
      add("attn.c_proj.weight", {C, C});
      add("attn.c_proj.bias", {C});
      add("ln_2.weight", {C});
      add("ln_2.bias", {C});
      add("mlp.c_fc.weight", {H, C});
      add("mlp.c_fc.bias", {H});
      add("mlp.c_proj.weight", {C, H});
      add("mlp.c_proj.bias", {C});
    }
    o = off("ln_f");
    t.push_back({"ln_f.weight", o, {C}});
    t.push_back({"ln_f.bias", o + C, {C}});
    if (!cfg_.tie_weights) t.push_back({"lm_head.weight", off("head"), {V, C}});
    return t;
  }

 private:
  static std::string block_name(int l) { return "block." + std::to_string(l); }
  std::size_t off(const std::string& name) const {
    return layout_.entry(*layout_.find(name)).offset;
  }
  float* ptr(float* theta, const std::string& name) const { return theta + off(name); }
  const float* head_theta(const float* theta) const {
    return theta + (cfg_.tie_weights ? off("embed") : off("head"));
  }
  float* grad_head(float* grad) const {
    return grad + (cfg_.tie_weights ? off("embed") : off("head"));
  }

  gpt_config cfg_;
  embedding embed_;
  transformer_block block_;
  layer_norm ln_f_;
  lm_head head_;
  param_layout layout_;
};

}  // namespace paco::nn

static_assert(paco::train::Model<paco::nn::gpt>);
