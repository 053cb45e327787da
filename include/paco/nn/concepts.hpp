#pragma once
// The Module concept: a pure function y = f(θ, x) with its vector-Jacobian product.
//
// A module owns neither its parameters nor its activations. θ is a span of param_count()
// elements (a slice of an arena); what backward needs is kept in a caller-owned cache of
// cache_size(d) elements; backward takes scratch_bytes(d) from the context. Shapes:
//   x  (N, in_width())  with N = d.B · d.T rows (tokens: int32 ids, (N) )
//   y  (N, out_width())
// forward writes every element of y and of the cache. backward ACCUMULATES into dx and dθ
// (callers zero them); dx may be null when the input needs no gradient.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

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

}  // namespace paco::nn
