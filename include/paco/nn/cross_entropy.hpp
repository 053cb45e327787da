#pragma once
// cross_entropy: mean next-token loss over N rows of logits (N,V) against targets (N).
// Not a Module (it ends the graph): it returns the loss and writes dlogits.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <Eigen/Core>

namespace paco::nn {

// Returns (1/N) Σ_n −log softmax(logits_n)[target_n], in nats.
// If dlogits is non-null, writes (not accumulates) dlogits = (softmax − onehot(target)) · scale/N;
// dlogits may alias logits. Requires: 0 ≤ target < V.  Cost: ≈ 5·N·V flops + N·V exp.
template <class T>
double cross_entropy(const T* logits, const std::int32_t* targets, T* dlogits, int N, int V,
                     T scale = T(1)) {
  using arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  double total = 0;
  const T inv_n = scale / T(N);
  for (int n = 0; n < N; ++n) {
    const T* row = logits + std::size_t(n) * V;
    Eigen::Map<const arr> z(row, V);
    const T m = z.maxCoeff();
    const int y = targets[n];
    const T zy = row[y];
    if (dlogits) {
      Eigen::Map<arr> g(dlogits + std::size_t(n) * V, V);
      g = (z - m).exp();  // may alias z: element-wise
      const T s = g.sum();
      total += double(m + std::log(s) - zy);
      g *= inv_n / s;
      g(y) -= inv_n;
    } else {
      total += double(m + std::log((z - m).exp().sum()) - zy);
    }
  }
  return total / N;
}

}  // namespace paco::nn
