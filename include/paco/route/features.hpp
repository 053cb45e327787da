#pragma once
// Router features (DiPaCo §2.4): g(doc) = the mean of a frozen base model's last hidden state
// over the document's first `prefix` tokens. Computed in batches of documents.

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "paco/nn/concepts.hpp"

namespace paco::route {

// Features of each sequence, (n, d) row-major. Sequences shorter than prefix use what they have
// (at least one token). Requires: prefix ≤ model ctx.
// ws: a workspace for dims {batch, prefix} to reuse across calls (made here when null).
template <nn::LanguageModel M>
std::vector<float> prefix_features(const M& model, const float* theta,
                                   const std::vector<std::span<const std::int32_t>>& seqs,
                                   int prefix = 32, int batch = 32,
                                   typename M::workspace* reuse = nullptr) {
  const int C = model.width();
  std::vector<float> out(seqs.size() * std::size_t(C), 0.0f);
  typename M::workspace own;
  if (!reuse || reuse->d.B != batch || reuse->d.T != prefix) {
    own = model.make_workspace({batch, prefix});
    reuse = &own;
  }
  auto& ws = *reuse;
  std::vector<std::int32_t> x(std::size_t(batch) * prefix);
  for (std::size_t b0 = 0; b0 < seqs.size(); b0 += std::size_t(batch)) {
    const std::size_t nb = std::min<std::size_t>(std::size_t(batch), seqs.size() - b0);
    for (std::size_t b = 0; b < std::size_t(batch); ++b)
      for (int t = 0; t < prefix; ++t) {
        const auto& s = seqs[std::min(b0 + b, seqs.size() - 1)];
        x[b * prefix + t] = s.empty() ? 0 : s[std::min<std::size_t>(std::size_t(t), s.size() - 1)];
      }
    model.forward(theta, x.data(), ws);
    const float* h = model.hidden(ws);  // (batch·prefix, C)
    for (std::size_t b = 0; b < nb; ++b) {
      const int n = int(std::clamp<std::size_t>(seqs[b0 + b].size(), 1, std::size_t(prefix)));
      float* f = &out[(b0 + b) * C];
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < C; ++c) f[c] += h[(b * prefix + t) * C + c] / float(n);
    }
  }
  return out;
}

}  // namespace paco::route
