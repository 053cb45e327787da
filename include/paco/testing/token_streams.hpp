#pragma once
// synthetic_stream: a small learnable token stream for trainer tests: one document whose
// token i is (stride·i + u_i) mod vocab, u_i uniform in [0, noise). Different strides and
// noise give shards with different statistics.

#include <cstddef>
#include <cstdint>

#include "paco/core/rng.hpp"
#include "paco/io/batches.hpp"

namespace paco::testing {

// Requires: noise >= 1, vocab >= 1. Ensures: n tokens in [0, vocab), one document; the same
// stream for the same arguments.
inline io::token_stream synthetic_stream(std::uint64_t seed, std::size_t n, std::uint64_t stride,
                                         std::uint64_t noise, std::uint64_t vocab = 64) {
  rng r(seed);
  io::token_stream s;
  s.doc_start = {0};
  for (std::size_t i = 0; i < n; ++i)
    s.ids.push_back(std::int32_t((i * stride + r.below(noise)) % vocab));
  return s;
}

}  // namespace paco::testing
