#pragma once
// seq<M0, M1, ...>: y = M_{n-1}(… M1(M0(x))).  θ = the children's θ back to back.
// cache = [children's caches | boundary activations a_0 … a_{n-2} (N, out_width of M_i)].
// Requires: M_i.out_width() == M_{i+1}.in_width().

#include <algorithm>
#include <array>
#include <tuple>
#include <utility>

#include "paco/nn/concepts.hpp"
#include "paco/nn/dispatch.hpp"

namespace paco::nn {

// clang-format off
template <Module... Ms>
  requires(sizeof...(Ms) >= 1)
struct seq {
  // clang-format on
  static constexpr std::size_t count = sizeof...(Ms);
  using first_type = std::tuple_element_t<0, std::tuple<Ms...>>;
  static constexpr bool takes_tokens = takes_tokens_v<first_type>;

  std::tuple<Ms...> children;

  seq() = default;
  explicit seq(Ms... ms) : children(std::move(ms)...) {}

  template <std::size_t I>
  const auto& get() const {
    return std::get<I>(children);
  }

  std::size_t param_count() const {
    return std::apply([](const auto&... m) { return (std::size_t(0) + ... + m.param_count()); },
                      children);
  }
  int in_width() const { return std::get<0>(children).in_width(); }
  int out_width() const { return std::get<count - 1>(children).out_width(); }
  std::size_t cache_size(dims d) const {
    std::size_t n = 0;
    for_each([&](const auto& m, std::size_t i) {
      n += m.cache_size(d);
      if (i + 1 < count) n += std::size_t(d.rows()) * m.out_width();
    });
    return n;
  }
  std::size_t scratch_bytes(dims d) const {
    std::size_t widest = 0, child = 0;
    for_each([&](const auto& m, std::size_t i) {
      if (i + 1 < count) widest = std::max<std::size_t>(widest, m.out_width());
      child = std::max(child, m.scratch_bytes(d));
    });
    return 2 * context::bytes_for<double>(widest * d.rows()) + child;
  }

  template <class T>
  void init(T* theta, rng& r) const {
    for_each([&](const auto& m, std::size_t) {
      m.init(theta, r);
      theta += m.param_count();
    });
  }

  template <class T, class Ctx>
  void forward(const T* theta, const input_t<seq, T>* x, T* y, T* cache, dims d, Ctx& ctx) const {
    forward_from<0>(theta, x, y, cache, cache + children_cache(d), d, ctx);
  }

  template <class T, class Ctx>
  void backward(const T* theta, const input_t<seq, T>* x, const T* dy, T* dx, T* dtheta,
                const T* cache, dims d, Ctx& ctx) const {
    typename Ctx::frame f(ctx);
    std::size_t widest = 0;
    for_each([&](const auto& m, std::size_t i) {
      if (i + 1 < count) widest = std::max<std::size_t>(widest, m.out_width());
    });
    T* buf[2] = {ctx.template take<T>(widest * d.rows()), ctx.template take<T>(widest * d.rows())};
    // Offsets of each child's θ, cache and output activation.
    std::array<std::size_t, count> pofs{}, cofs{}, aofs{};
    std::size_t p = 0, c = 0, a = children_cache(d);
    for_each([&](const auto& m, std::size_t i) {
      pofs[i] = p, cofs[i] = c, aofs[i] = a;
      p += m.param_count();
      c += m.cache_size(d);
      if (i + 1 < count) a += std::size_t(d.rows()) * m.out_width();
    });
    backward_from<count - 1>(theta, x, dy, dx, dtheta, cache, d, ctx, buf, pofs, cofs, aofs);
  }

 private:
  template <class F>
  void for_each(F&& f) const {
    // clang-format off
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (f(std::get<I>(children), I), ...);
    }(std::make_index_sequence<count>{});
    // clang-format on
  }
  std::size_t children_cache(dims d) const {
    std::size_t n = 0;
    for_each([&](const auto& m, std::size_t) { n += m.cache_size(d); });
    return n;
  }

  template <std::size_t I, class T, class X, class Ctx>
  void forward_from(const T* theta, const X* x, T* y, T* cache, T* act, dims d, Ctx& ctx) const {
    const auto& m = std::get<I>(children);
    if constexpr (I + 1 == count) {
      module_forward(m, theta, x, y, cache, d, ctx);
    } else {
      module_forward(m, theta, x, act, cache, d, ctx);
      forward_from<I + 1>(theta + m.param_count(), static_cast<const T*>(act), y,
                          cache + m.cache_size(d), act + std::size_t(d.rows()) * m.out_width(), d,
                          ctx);
    }
  }

  // Runs child I's backward given dy for its output, then recurses toward child 0.
  template <std::size_t I, class T, class X, class Ctx>
  void backward_from(const T* theta, const X* x, const T* dy, T* dx, T* dtheta, const T* cache,
                     dims d, Ctx& ctx, T* (&buf)[2], const std::array<std::size_t, count>& pofs,
                     const std::array<std::size_t, count>& cofs,
                     const std::array<std::size_t, count>& aofs) const {
    const auto& m = std::get<I>(children);
    if constexpr (I == 0) {
      module_backward(m, theta, x, dy, dx, dtheta, cache + cofs[0], d, ctx);
    } else {
      const T* in = cache + aofs[I - 1];  // this child's input activation
      T* din = buf[I % 2];
      zero(ctx, din, std::size_t(d.rows()) * m.in_width());
      module_backward(m, theta + pofs[I], in, dy, din, dtheta + pofs[I], cache + cofs[I], d, ctx);
      backward_from<I - 1>(theta, x, static_cast<const T*>(din), dx, dtheta, cache, d, ctx, buf,
                           pofs, cofs, aofs);
    }
  }
};

}  // namespace paco::nn
