#pragma once
// The block of a model of one's own (not nn::gpt's): two attention sublayers per MLP sublayer,
// composed from nn modules. examples/three_levels trains a three-level grid over it in one
// process; examples/three_levels_job the same model as store + worker processes.
#include <utility>

#include <paco/paco.hpp>

using my_block =
    paco::nn::seq<paco::nn::attention_block, paco::nn::attention_block, paco::nn::mlp_block>;

inline my_block make_my_block(int C, int heads) {
  namespace nn = paco::nn;
  auto attention = [&] {
    return nn::attention_block{nn::seq<nn::layer_norm, nn::causal_attention>(
        nn::layer_norm{.C = C}, nn::causal_attention{.C = C, .NH = heads})};
  };
  nn::mlp m(nn::linear{.in = C, .out = 4 * C}, nn::gelu{.C = 4 * C},
            nn::linear{.in = 4 * C, .out = C});
  nn::mlp_block mlp{nn::seq<nn::layer_norm, nn::mlp>(nn::layer_norm{.C = C}, std::move(m))};
  return my_block(attention(), attention(), std::move(mlp));
}
