#pragma once
// error_feedback: a decorator that keeps each module's compression residual in a caller-provided
// span (the arena's plane::residual, module m's slice) and folds it into the next send:
//   g̃ = g + e;   payload = encode(g̃);   e ← g̃ − decode(payload)      (ALGORITHMS.md §5.2)
// so what was not sent this round is sent later. With identity the payload is g bit for bit.

#include <cstring>

#include "paco/compress/concepts.hpp"
#include "paco/compress/detail/formulas.hpp"
#include "paco/core/buffer.hpp"

namespace paco::compress {

// residual ← g + residual (the corrected gradient g̃, stored in place).
// Requires: g.size() == residual.size(). Ensures: residual_i = g_i exactly where it was 0.
inline void ef_accumulate(slice<const float> g, slice<float> residual) {
  PACO_ASSERT(g.size() == residual.size(), "ef_accumulate: sizes differ");
  float* r = residual.data();
  const float* x = g.data();
  for (std::size_t i = 0; i < g.size(); ++i) r[i] = formula::ef_accumulate(x[i], r[i]);
}
// residual ← residual − sent (what was not sent). Requires: equal sizes.
inline void ef_subtract(slice<float> residual, slice<const float> sent) {
  PACO_ASSERT(sent.size() == residual.size(), "ef_subtract: sizes differ");
  float* r = residual.data();
  const float* s = sent.data();
  for (std::size_t i = 0; i < sent.size(); ++i) r[i] = formula::ef_residual(r[i], s[i]);
}

// error_feedback<C>: C with a residual per module. Owns one scratch vector (the decoded send),
// grown to the largest module seen, so steady-state calls do not allocate. A codec that offers
// encode_feedback(g, residual, level, out) (quantize) does the three passes fused per block.
template <Compressor C>
class error_feedback {
 public:
  using level_type = typename C::level_type;
  static constexpr wire_reduction reduction = C::reduction;

  error_feedback() = default;
  explicit error_feedback(C inner) : inner_(std::move(inner)) {}
  C& inner() noexcept { return inner_; }
  const C& inner() const noexcept { return inner_; }

  level_type default_level() const { return inner_.default_level(); }
  std::size_t wire_bytes(std::size_t n, const level_type& l) const {
    return inner_.wire_bytes(n, l);
  }

  // Requires: residual.size() == g.size() (module m's span of plane::residual, zero at start);
  // out.size() == wire_bytes(g.size(), l).
  // Ensures: out = encode(g + e); residual = (g + e) − decode(out). On error nothing is sent and
  // the residual holds g + e (so the gradient is not lost).
  // Cost: the inner encode and decode plus three passes over n floats.
  status encode(slice<const float> g, slice<float> residual, const level_type& l,
                slice<std::byte> out) {
    if (g.size() != residual.size())
      return {errc::mismatch, "error_feedback: residual of " + std::to_string(residual.size()) +
                                  " elements for a span of " + std::to_string(g.size())};
    if constexpr (requires { inner_.encode_feedback(g, residual, l, out); }) {
      return inner_.encode_feedback(g, residual, l, out);  // fused per block (quantize)
    }
    ef_accumulate(g, residual);
    if (auto s = inner_.encode(slice<const float>(residual), l, out); !s) return s;
    if (sent_.size() < g.size()) sent_.resize(g.size());
    slice<float> sent{sent_.data(), g.size()};
    if (auto s = inner_.decode(slice<const std::byte>(out), l, sent); !s) return s;
    ef_subtract(residual, sent);
    return {};
  }
  status decode(slice<const std::byte> in, const level_type& l, slice<float> y) const {
    return inner_.decode(in, l, y);
  }
  double error(const level_type& l, slice<const float> g) { return inner_.error(l, g); }

  // error_feedback bound to one module's residual: a Compressor (encode(x, l, out) sends x + e).
  class bound {
   public:
    using compressor_concept = compressor_tag;
    using level_type = typename C::level_type;
    static constexpr wire_reduction reduction = C::reduction;

    bound(error_feedback& ef, slice<float> residual) : ef_(&ef), residual_(residual) {}
    level_type default_level() const { return ef_->default_level(); }
    std::size_t wire_bytes(std::size_t n, const level_type& l) const {
      return ef_->wire_bytes(n, l);
    }
    status encode(slice<const float> x, const level_type& l, slice<std::byte> out) {
      return ef_->encode(x, residual_, l, out);
    }
    status decode(slice<const std::byte> in, const level_type& l, slice<float> y) const {
      return ef_->decode(in, l, y);
    }
    double error(const level_type& l, slice<const float> g) { return ef_->error(l, g); }

   private:
    error_feedback* ef_;
    slice<float> residual_;
  };
  // Requires: residual outlives the returned view.
  bound bind(slice<float> residual) { return bound(*this, residual); }

 private:
  C inner_{};
  buffer<float> sent_;
};

}  // namespace paco::compress
