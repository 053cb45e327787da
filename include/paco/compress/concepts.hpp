#pragma once
// Compressor and MultiRoundCompressor: the extension points of compress/. A compressor turns a
// module's pseudo-gradient (any contiguous float span: matrices are views) into a payload of
// exactly wire_bytes() bytes, and back. Types opt in with a tag alias (stdexec style).

#include <concepts>
#include <cstddef>

#include "paco/core/error.hpp"
#include "paco/core/slice.hpp"

namespace paco::compress {

// How the sync layer combines the payloads of P workers.
//   sum:    payloads are element-wise summable (decode(a) + decode(b) is meaningful in the wire
//           element type): reduce-scatter / all-reduce on the wire, O(bytes) per worker.
//   gather: payloads carry per-worker scales, indices or masks: all-gather them, decode each
//           and average after decoding, O(P·bytes) per worker.
enum class wire_reduction { sum, gather };

// Opt-in tags: a compressor says `using compressor_concept = compressor_tag;`.
struct compressor_tag {};
struct multi_round_tag {};

// Requires: nothing. Ensures: a Compressor `c` with level type L satisfies
//   c.wire_bytes(n, l)             bytes of the payload of an n-element span at level l;
//   c.encode(x, l, out)            writes exactly wire_bytes(x.size(), l) bytes into `out`
//                                  (errc::invalid_argument if out.size() differs or l is bad);
//   c.decode(in, l, y)             fills y (y.size() is n) from a payload; returns errc::corrupt
//                                  on a truncated, oversized or inconsistent payload and never
//                                  reads outside `in`;
//   c.error(l, g)                  ‖g − decode(encode(g))‖₂ (deterministic rounding): the error
//                                  model of L-GreCo (ALGORITHMS.md §5.1, not squared);
//   C::reduction                   whether payloads are summed or all-gathered on the wire;
//   c.default_level()              the level used when L-GreCo is off.
template <class C>
concept Compressor = std::same_as<typename C::compressor_concept, compressor_tag> &&
    std::regular<typename C::level_type> &&
    requires(C& c, const C& cc, std::size_t n, const typename C::level_type& l,
             slice<const float> x, slice<std::byte> out, slice<const std::byte> in,
             slice<float> y) {
  { C::reduction } -> std::convertible_to<wire_reduction>;
  { cc.default_level() } -> std::convertible_to<typename C::level_type>;
  { cc.wire_bytes(n, l) } -> std::same_as<std::size_t>;
  { c.encode(x, l, out) } -> std::same_as<status>;
  { cc.decode(in, l, y) } -> std::same_as<status>;
  { c.error(l, x) } -> std::convertible_to<double>;
};

// Whether payloads of C may be summed on the wire (identity, cast, powersgd rounds).
template <class C>
inline constexpr bool summable_v = C::reduction == wire_reduction::sum;

// A row-major matrix view's shape: a span of rows·cols floats seen as (rows, cols).
struct matrix_shape {
  std::size_t rows = 0;
  std::size_t cols = 0;
  constexpr std::size_t size() const noexcept { return rows * cols; }
  friend constexpr bool operator==(matrix_shape, matrix_shape) = default;
};

// A compressor that needs several collectives per step (PowerSGD: P then Q). Each round's
// payload is summed across workers before the next round starts.
//   c.init(st, shape, l)                 (re)allocates per-module state for level l;
//   c.round_bytes(shape, l, k)           bytes of round k's payload (k < C::rounds);
//   c.encode_round(st, k, x, summed, out) writes round k's payload; `summed` is the sum over
//                                        workers of round k−1's payloads (empty for k = 0);
//   c.decode(st, summed, world, y)       the reconstruction from the last round's sum;
//   c.error(shape, l, g)                 the L-GreCo error model.
template <class C>
concept MultiRoundCompressor = std::same_as<typename C::compressor_concept, multi_round_tag> &&
    std::regular<typename C::level_type> &&
    requires(C& c, const C& cc, typename C::state_type& st, matrix_shape shape, int k,
             std::size_t world, const typename C::level_type& l, slice<const float> x,
             slice<std::byte> out, slice<const std::byte> in, slice<float> y) {
  { C::rounds } -> std::convertible_to<int>;
  { C::reduction } -> std::convertible_to<wire_reduction>;
  { cc.default_level() } -> std::convertible_to<typename C::level_type>;
  { c.init(st, shape, l) } -> std::same_as<status>;
  { cc.round_bytes(shape, l, k) } -> std::same_as<std::size_t>;
  { cc.wire_bytes(shape, l) } -> std::same_as<std::size_t>;
  { c.encode_round(st, k, x, in, out) } -> std::same_as<status>;
  { c.decode(st, in, world, y) } -> std::same_as<status>;
  { c.error(shape, l, x) } -> std::convertible_to<double>;
};

}  // namespace paco::compress
