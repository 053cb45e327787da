#pragma once
// The nn concepts: Module (a pure function and its vector-Jacobian product) and Model /
// LanguageModel (a trainable model over a flat arena).
//
// Module: a pure function y = f(θ, x) with its vector-Jacobian product.
//
// A module owns neither its parameters nor its activations. θ is a span of param_count()
// elements (a slice of an arena); what backward needs is kept in a caller-owned cache of
// cache_size(d) elements; backward takes scratch_bytes(d) from the context. Shapes:
//   x  (N, in_width())  with N = d.B · d.T rows (tokens: int32 ids, (N) )
//   y  (N, out_width())
// forward writes every element of y and of the cache. backward ACCUMULATES into dx and dθ
// (callers zero them); dx may be null when the input needs no gradient.
// Models: linear, layer_norm, gelu, embedding, causal_attention, lm_head and the composites
// seq, residual, repeat; archetype testing::module_archetype.
//
// Model: what the inner loop, nn::replica, path workers, checkpoints and the one scorer ask of a
// trainable model. Its parameters live in an arena laid out by layout(); named tensors() say
// which span is which tensor (checkpoints, export); a workspace made for a batch shape (its member
// d) holds activations; forward_backward(θ, ∇, tokens, targets, ws, scale) ACCUMULATES
// scale·∇θ of the mean loss into a full plane and returns the loss (nats per token); loss() is
// the forward pass alone. Opt in with `using model_tag = void;`. A Module is not a Model.
//
// LanguageModel refines it with what routing and the one scorer read after a forward pass:
// forward(θ, tokens, ws) alone, logits(ws) (N × vocab()) and hidden(ws) (N × width(), the last
// block's output that router features average). Models: nn::gpt, nn::block_lm<Block>;
// archetypes testing::model_archetype, testing::language_model_archetype. train/ re-exports
// both as train::Model and train::LanguageModel.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "paco/core/arena.hpp"
#include "paco/core/param_layout.hpp"
#include "paco/core/rng.hpp"
#include "paco/nn/context.hpp"

namespace paco::nn {

// Batch shape of one call: B sequences of T positions.
struct dims {
  int B = 1;
  int T = 1;
  constexpr int rows() const noexcept { return B * T; }
};

// Modules whose input is token ids say `static constexpr bool takes_tokens = true`.
// clang-format off
template <class M>
constexpr bool takes_tokens_v = requires { requires M::takes_tokens; };
// clang-format on

// The element type of module M's input when it computes in T.
template <class M, class T>
using input_t = std::conditional_t<takes_tokens_v<M>, std::int32_t, T>;

// clang-format off
template <class M>
concept Module = std::copy_constructible<M> &&
    requires(const M& m, dims d, rng& r, context& ctx, float* p, const float* cp,
             const input_t<M, float>* x) {
      { m.param_count() } -> std::convertible_to<std::size_t>;
      { m.in_width() } -> std::convertible_to<int>;
      { m.out_width() } -> std::convertible_to<int>;
      { m.cache_size(d) } -> std::convertible_to<std::size_t>;
      { m.scratch_bytes(d) } -> std::convertible_to<std::size_t>;
      m.init(p, r);
      m.forward(cp, x, p, p, d, ctx);
      m.backward(cp, x, cp, p, p, cp, d, ctx);
    };
// clang-format on

template <class M>
concept Model = requires(const M& m, arena<host>& a, std::uint64_t seed, dims d, const float* th,
                         float* g, const std::int32_t* tok, typename M::workspace& ws) {
  typename M::model_tag;
  { m.layout() } -> std::convertible_to<const param_layout&>;
  { m.param_count() } -> std::convertible_to<std::size_t>;
  m.tensors();
  m.init(a, seed);
  { m.make_workspace(d) } -> std::same_as<typename M::workspace>;
  { ws.d } -> std::convertible_to<dims>;
  { m.forward_backward(th, g, tok, tok, ws, 1.0f) } -> std::convertible_to<double>;
  { m.loss(th, tok, tok, ws) } -> std::convertible_to<double>;
};

template <class M>
concept LanguageModel = Model<M> &&
    requires(const M& m, const float* th, const std::int32_t* tok, typename M::workspace& ws) {
  m.forward(th, tok, ws);
  { m.logits(ws) } -> std::convertible_to<const float*>;
  { m.hidden(ws) } -> std::convertible_to<const float*>;
  { m.vocab() } -> std::convertible_to<int>;
  { m.width() } -> std::convertible_to<int>;
};

// BlockModel: a LanguageModel made of embedding → blocks() × block() → final_norm() → head, laid
// out as "embed", block_name(0 … blocks()−1), "ln_f" and (untied) "head" in that order, whose
// parts are reachable: what a pipeline stage (pipeline/stage.hpp) runs a contiguous range of.
// Models: nn::block_lm<Block>, nn::gpt.
template <class M>
concept BlockModel = LanguageModel<M> && requires(const M& m, int l, const std::string& name) {
  { m.blocks() } -> std::convertible_to<int>;
  m.block();
  m.embedding_part();
  m.final_norm();
  m.head_part();
  { m.off(name) } -> std::convertible_to<std::size_t>;
  { M::block_name(l) } -> std::convertible_to<std::string>;
  { m.shape().tie_weights } -> std::convertible_to<bool>;
};

}  // namespace paco::nn
