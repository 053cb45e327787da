#pragma once
// Delta transforms of DiPaCo §2.7 / ALGORITHMS.md §3.4: how the pseudo-gradients of the paths
// through one module become that module's outer gradient.
//   Δ(l,e) = s · Σ_i α_i Δ_i,   α_i = w_i / Σ_i' w_i'   (w_i = shard tokens, or 1: plain mean)
//   s = √P_{l,e} (sqrt_paths), 1/√P_{l,e} (inv_sqrt_paths) or 1 (none)
// Each choice is a named field so experiments can switch it.

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::outer {

enum class path_rescale { none, sqrt_paths, inv_sqrt_paths };

inline const char* to_string(path_rescale r) {
  switch (r) {
    case path_rescale::none: return "none";
    case path_rescale::sqrt_paths: return "sqrt_paths";
    case path_rescale::inv_sqrt_paths: return "inv_sqrt_paths";
  }
  return "?";
}
inline result<path_rescale> parse_path_rescale(const std::string& s) {
  if (s == "none") return path_rescale::none;
  if (s == "sqrt_paths") return path_rescale::sqrt_paths;
  if (s == "inv_sqrt_paths") return path_rescale::inv_sqrt_paths;
  return error(errc::invalid_argument,
               "path_rescale must be none, sqrt_paths or inv_sqrt_paths, got '" + s + "'");
}

struct delta_options {
  bool weight_by_shard = true;                // α_i ∝ shard tokens (else uniform)
  path_rescale rescale = path_rescale::none;  // s
};

// The coefficient c_i = s·α_i of each contribution, given the shard weights of the paths that
// arrived (a late or dead path is simply absent) and P_{l,e} (paths through the module).
// Requires: !weights.empty(); weights ≥ 0 with a positive sum.
inline std::vector<double> delta_coefficients(const std::vector<double>& weights, int paths_through,
                                              const delta_options& o) {
  std::vector<double> c(weights.size());
  double sum = 0;
  for (double w : weights) sum += o.weight_by_shard ? w : 1.0;
  const double s = o.rescale == path_rescale::sqrt_paths ? std::sqrt(double(paths_through))
                   : o.rescale == path_rescale::inv_sqrt_paths
                       ? 1.0 / std::sqrt(double(paths_through))
                       : 1.0;
  for (std::size_t i = 0; i < weights.size(); ++i)
    c[i] = s * (o.weight_by_shard ? weights[i] : 1.0) / sum;
  return c;
}

// out = Σ_i c_i · deltas[i]. Requires: every span the size of out.
inline void combine_deltas(std::span<float> out, const std::vector<std::span<const float>>& deltas,
                           const std::vector<double>& coeff) {
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    const float c = float(coeff[i]);
    const float* d = deltas[i].data();
    for (std::size_t k = 0; k < out.size(); ++k) out[k] += c * d[k];
  }
}

}  // namespace paco::outer
