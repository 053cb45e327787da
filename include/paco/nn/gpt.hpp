#pragma once
// gpt: a GPT-2 style byte-level language model composed from paco's pure modules: a block_lm
// (nn/block_lm.hpp) whose blocks are transformer blocks,
//   block = residual(layer_norm → causal_attention) → residual(layer_norm → mlp),
// configured by gpt_config, its tensors named as GPT-2's.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/nn/block_lm.hpp"
#include "paco/nn/causal_attention.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/nn/gelu.hpp"
#include "paco/nn/layer_norm.hpp"
#include "paco/nn/linear.hpp"
#include "paco/nn/residual.hpp"
#include "paco/nn/seq.hpp"

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

  // The parts around the blocks.
  lm_shape shape() const {
    return {.vocab = vocab, .ctx = ctx, .d = d, .tie_weights = tie_weights, .init_std = init_std};
  }

  // Ensures: ok() iff every field is in its accepted range; the error names the field.
  status validate() const {
    if (auto s = shape().validate("gpt_config"); !s) return s;
    auto bad = [](const char* f, const std::string& why) {
      return status(errc::invalid_argument, std::string("gpt_config.") + f + " " + why);
    };
    if (layers < 0 || layers > 1024) return bad("layers", "must be in [0, 1024]");
    if (heads < 1 || d % heads != 0)
      return bad("heads", "must be ≥ 1 and divide d = " + std::to_string(d));
    if (mlp_mult < 1 || mlp_mult > 64) return bad("mlp_mult", "must be in [1, 64]");
    return {};
  }
};

// GPT-2: block_lm over transformer blocks, configured by gpt_config, with GPT-2's tensor names.
class gpt : public block_lm<transformer_block> {
 public:
  // Requires: cfg.validate().ok() (checked: throws error_exception otherwise).
  explicit gpt(gpt_config cfg)
      : block_lm(checked(cfg).shape(), block_of(cfg), cfg.layers), cfg_(cfg) {}

  const gpt_config& config() const noexcept { return cfg_; }

  // Model FLOPs per token of a training step, counted as 6·params + 12·layers·T·d (fwd + bwd,
  // full attention): the same count is used for any peer.
  double train_flops_per_token(int T) const {
    return 6.0 * double(param_count()) + 12.0 * cfg_.layers * double(T) * cfg_.d;
  }

  // Every parameter tensor with a PyTorch-style name (GPT-2's), its offset in a plane and its
  // shape: block_lm's tensors with each block split into its modules' tensors.
  std::vector<named_tensor> tensors() const {
    std::vector<named_tensor> t;
    const std::size_t C = cfg_.d, H = std::size_t(cfg_.mlp_mult) * C;
    for (auto& whole : block_lm::tensors()) {
      if (!whole.name.starts_with("block.")) {
        t.push_back(std::move(whole));
        continue;
      }
      const std::string p = "h." + whole.name.substr(6) + ".";
      std::size_t o = whole.offset;
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
    return t;
  }

 private:
  static const gpt_config& checked(const gpt_config& c) {
    c.validate().throw_if_error();
    return c;
  }
  static transformer_block block_of(const gpt_config& c) {
    const float proj = c.init_std / std::sqrt(2.0f * float(std::max(c.layers, 1)));
    return make_block(c.d, c.heads, c.mlp_mult * c.d, c.init_std, proj);
  }

  gpt_config cfg_;
};

}  // namespace paco::nn

static_assert(paco::nn::LanguageModel<paco::nn::gpt>);
