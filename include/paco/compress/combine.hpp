#pragma once
// Combining P workers' payloads into the mean pseudo-gradient, per reduction kind:
//   gather_mean       all-gathered payloads (quantize, topk): y = Σ_w a_w·decode(p_w) / Σ_w a_w
//   summed_mean       one payload that the wire already summed (identity, cast): y = decode(Σ)/P
//   ties_merge_payloads  all-gathered sign_prune payloads: TIES sign election + disjoint mean
// Weights a_w are shard sizes (DiLoCo's non-i.i.d. weighting) or empty for a plain mean.

#include <span>
#include <string>

#include "paco/compress/concepts.hpp"
#include "paco/compress/sign_prune.hpp"

namespace paco::compress {

// Requires: C's payloads are all-gathered or summable (any Compressor works); weights empty or
// one per payload, positive; scratch.size() >= y.size(). Ensures: y = weighted mean of the
// decoded payloads; the first decode error is returned (y unspecified).
// Cost: P decodes plus P passes over n floats.
template <Compressor C>
status gather_mean(const C& codec, std::span<const slice<const std::byte>> payloads,
                   const typename C::level_type& l, slice<float> y, slice<float> scratch,
                   std::span<const double> weights = {}) {
  if (payloads.empty()) return {errc::invalid_argument, "gather_mean: no payloads"};
  if (!weights.empty() && weights.size() != payloads.size())
    return {errc::mismatch, "gather_mean: " + std::to_string(weights.size()) + " weights for " +
                                std::to_string(payloads.size()) + " payloads"};
  if (scratch.size() < y.size())
    return {errc::invalid_argument, "gather_mean: scratch smaller than the output"};
  double total = 0;
  for (std::size_t w = 0; w < payloads.size(); ++w) total += weights.empty() ? 1.0 : weights[w];
  if (!(total > 0)) return {errc::invalid_argument, "gather_mean: weights must sum to > 0"};
  const slice<float> tmp{scratch.data(), y.size()};
  for (std::size_t w = 0; w < payloads.size(); ++w) {
    if (auto s = codec.decode(payloads[w], l, w == 0 ? y : tmp); !s) return s;
    const float a = static_cast<float>((weights.empty() ? 1.0 : weights[w]) / total);
    if (w == 0)
      for (std::size_t i = 0; i < y.size(); ++i) y[i] *= a;
    else
      for (std::size_t i = 0; i < y.size(); ++i) y[i] += a * tmp[i];
  }
  return {};
}

// Requires: C summable (identity, cast); `summed` is the wire sum of P >= 1 payloads.
// Ensures: y = decode(summed) / P.
template <Compressor C>
requires(C::reduction == wire_reduction::sum) status
    summed_mean(const C& codec, slice<const std::byte> summed, std::size_t workers,
                const typename C::level_type& l, slice<float> y) {
  if (workers == 0) return {errc::invalid_argument, "summed_mean: workers = 0, accepted >= 1"};
  if (auto s = codec.decode(summed, l, y); !s) return s;
  const float inv = 1.0f / static_cast<float>(workers);
  for (auto& v : y.span()) v *= inv;
  return {};
}

// TIES merge of P decoded vectors without holding them: pass 1 sums them (the elected sign is
// the sign of that sum), pass 2 averages the values that agree with it. decode(w, out) writes
// worker w's vector into out (n floats) and returns a status; it is called twice per worker.
// Requires: scratch.size() >= 3·y.size(). Ensures: y equals ties_merge of the P vectors (up to
// summation order); the first decode error is returned (y unspecified). Cost: 2·P decodes.
template <class Decode>
status ties_merge_decoded(std::size_t workers, Decode&& decode, slice<float> y,
                          slice<float> scratch) {
  const std::size_t n = y.size();
  if (workers == 0) return {errc::invalid_argument, "ties_merge: no payloads"};
  if (scratch.size() < 3 * n)
    return {errc::invalid_argument, "ties_merge: scratch needs 3·n floats"};
  float* tmp = scratch.data();      // (n) one decoded payload
  float* acc = scratch.data() + n;  // (n) Σ values, then Σ agreeing values
  float* cnt = acc + n;             // (n) number of agreeing workers (exact below 2^24)
  const slice<float> dec{tmp, n};
  for (std::size_t i = 0; i < n; ++i) acc[i] = 0.0f;
  for (std::size_t w = 0; w < workers; ++w) {
    if (auto s = decode(w, dec); !s) return s;
    for (std::size_t i = 0; i < n; ++i) acc[i] += tmp[i];
  }
  for (std::size_t i = 0; i < n; ++i) {
    y[i] = acc[i] > 0 ? 1.0f : (acc[i] < 0 ? -1.0f : 0.0f);  // elected sign
    acc[i] = 0.0f;
    cnt[i] = 0.0f;
  }
  for (std::size_t w = 0; w < workers; ++w) {
    if (auto s = decode(w, dec); !s) return s;
    for (std::size_t i = 0; i < n; ++i) {
      const bool agree = (y[i] > 0 && tmp[i] > 0) || (y[i] < 0 && tmp[i] < 0);
      acc[i] += agree ? tmp[i] : 0.0f;
      cnt[i] += agree ? 1.0f : 0.0f;
    }
  }
  for (std::size_t i = 0; i < n; ++i) y[i] = cnt[i] > 0 ? acc[i] / cnt[i] : 0.0f;
  return {};
}

// TIES merge of all-gathered sign_prune payloads (ties_merge_decoded over the codec's decode).
// Requires: scratch.size() >= 3·y.size(). Ensures: y equals ties_merge of the decoded payloads
// (up to summation order). Cost: 2·P decodes, no allocation.
inline status ties_merge_payloads(const sign_prune& codec,
                                  std::span<const slice<const std::byte>> payloads, double prune,
                                  slice<float> y, slice<float> scratch) {
  if (payloads.empty()) return {errc::invalid_argument, "ties_merge_payloads: no payloads"};
  return ties_merge_decoded(
      payloads.size(),
      [&](std::size_t w, slice<float> out) { return codec.decode(payloads[w], prune, out); }, y,
      scratch);
}

}  // namespace paco::compress
