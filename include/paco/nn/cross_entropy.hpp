#pragma once
// cross_entropy: mean next-token loss over N rows of logits (N,V) against targets (N).
// Not a Module (it ends the graph): it returns the loss and writes dlogits.

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace paco::nn {

// Returns (1/N) Σ_n −log softmax(logits_n)[target_n], in nats.
// If dlogits is non-null, writes (not accumulates) dlogits = (softmax − onehot(target)) · scale/N;
// dlogits may alias logits. Requires: 0 ≤ target < V.  Cost: ≈ 5·N·V flops + N·V exp.
template <class T>
double cross_entropy(const T* logits, const std::int32_t* targets, T* dlogits, int N, int V,
                     T scale = T(1)) {
  double total = 0;
  const T inv_n = scale / T(N);
  for (int n = 0; n < N; ++n) {
    const T* row = logits + std::size_t(n) * V;
    T m = row[0];
    for (int v = 1; v < V; ++v) m = std::max(m, row[v]);
    T s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(row[v] - m);
    const T lse = m + std::log(s);
    const int y = targets[n];
    total += double(lse - row[y]);
    if (dlogits) {
      T* g = dlogits + std::size_t(n) * V;
      const T inv_s = T(1) / s;
      for (int v = 0; v < V; ++v) g[v] = std::exp(row[v] - m) * inv_s * inv_n;
      g[y] -= inv_n;
    }
  }
  return total / N;
}

}  // namespace paco::nn
