#pragma once
// Options, costs and reduction operators shared by the collectives of paco::collectives.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <utility>

#include "paco/net/concepts.hpp"

namespace paco::collectives {

// What one collective costs one rank: messages on its critical path and bytes it sends.
struct wire_cost {
  std::size_t steps = 0;  // sequential communication steps (latency terms)
  std::size_t bytes = 0;  // bytes this rank puts on the wire (at most; blocks are balanced)
};

// Options of a collective. Every rank of a group must pass the same tag, chunk_bytes and order.
struct collective_options {
  // The collective returns by this time on every rank, with errc::timeout if it did not finish.
  net::deadline until = net::after(std::chrono::seconds(60));
  // Tag of every message of this collective; concurrent collectives need distinct tags.
  net::tag_t tag = 0x70000000u;
  // Messages are cut into chunks of this many bytes so that receiving, reducing and forwarding
  // overlap (pipelining). Accepted range: >= 1 (rounded to whole elements, at least one).
  std::size_t chunk_bytes = std::size_t(1) << 20;
  // The ring order: a permutation of 0..p-1 (e.g. bandwidth-aware, from paco::place). Empty:
  // 0, 1, ..., p-1. Ring collectives only.
  std::span<const int> order = {};
};

// Elementwise sum (the default reduction).
struct sum {
  template <class V>
  constexpr V operator()(V a, V b) const noexcept {
    return a + b;
  }
};
// Elementwise maximum.
struct maximum {
  template <class V>
  constexpr V operator()(V a, V b) const noexcept {
    return a < b ? b : a;
  }
};
// Elementwise minimum.
struct minimum {
  template <class V>
  constexpr V operator()(V a, V b) const noexcept {
    return b < a ? b : a;
  }
};

// The block of n elements that rank r of p owns in reduce_scatter / contributes in all_gather:
// {offset, count}. Ensures: blocks of r = 0..p-1 tile [0, n) in order; counts differ by <= 1.
inline std::pair<std::size_t, std::size_t> block_of(std::size_t n, int p, int r) noexcept {
  std::size_t up = static_cast<std::size_t>(p), ur = static_cast<std::size_t>(r);
  std::size_t base = n / up, rem = n % up;
  return {ur * base + std::min(ur, rem), base + (ur < rem ? 1 : 0)};
}

}  // namespace paco::collectives
