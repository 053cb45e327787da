#pragma once
// aux_head: the auxiliary head a local-loss stage (Laskin et al.'s local parallelism) trains its
// blocks through. Stage k < K−1 reads its output activation a_k (N, C) with its own head and
// minimises the next-token cross-entropy of that readout; nothing flows back to stage k−1.
//
//   linear          a private layer norm, then a private linear map C → V (no bias): the "private
//                   learnable readout" secondary sources attribute to Laskin et al. (the paper's
//                   full text could not be read; LOCAL_PARALLELISM.md §1.2). θ = [γ | β | W].
//   shared_readout  τ · head(ln_f(a_k)) through a read-only, stale copy of the LAST stage's final
//                   norm and head (SOLO's shared readout, reconstructed from secondary sources),
//                   with one learnable temperature τ (init 1). θ = [τ]. The copy is refreshed at
//                   fixed steps (stage_runner), so results do not depend on timing.
//
// Heads are training-only: they are not part of the model, its export or the scorer.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "paco/core/error.hpp"
#include "paco/core/rng.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/nn/cross_entropy.hpp"
#include "paco/nn/gemm.hpp"
#include "paco/nn/layer_norm.hpp"
#include "paco/nn/linear.hpp"

namespace paco::pipeline {

enum class head_kind { linear, shared_readout };

inline const char* name(head_kind h) {
  return h == head_kind::linear ? "linear" : "shared_readout";
}
// Ensures: the kind named s, or invalid_argument naming `field` and the accepted names.
inline result<head_kind> parse_head_kind(const std::string& s,
                                         const std::string& field = "pipeline.head") {
  if (s == "linear") return head_kind::linear;
  if (s == "shared_readout") return head_kind::shared_readout;
  return paco::error(errc::invalid_argument,
                     field + ": '" + s + "' is not a head (linear or shared_readout)");
}

struct aux_head {
  head_kind kind = head_kind::linear;
  int C = 0;    // the model's width
  int V = 256;  // vocabulary
  float init_std = 0.02f;

  std::size_t param_count() const {
    return kind == head_kind::linear ? 2 * std::size_t(C) + std::size_t(V) * C : 1;
  }
  // The size of the copy a shared_readout head reads: the final norm's θ then the head's W.
  std::size_t readout_size() const { return 2 * std::size_t(C) + std::size_t(V) * C; }
  // Working memory (floats) of one forward_backward of shape d.
  std::size_t memory_size(nn::dims d) const {
    const std::size_t N = d.rows();
    return 2 * N + 2 * N * C + 2 * N * V + 2 * std::size_t(C);
  }

  // Ensures: θ holds a fresh head: γ = 1, β = 0, W ~ N(0, init_std) (linear); τ = 1.
  void init(float* theta, rng& r) const {
    if (kind == head_kind::shared_readout) {
      theta[0] = 1.0f;
      return;
    }
    norm().init(theta, r);
    map().init(theta + 2 * C, r);
  }

  // The head's loss on activations x (N, C) against targets (N): forward and backward at once.
  // ACCUMULATES ∇ of (scale · mean cross-entropy) into dθ and into dx (N, C).
  // readout: the copy (readout_size() floats) for shared_readout, unused for linear.
  // mem: memory_size(d) floats. Returns the mean loss (nats per token).
  double forward_backward(const float* theta, float* dtheta, const float* readout, const float* x,
                          float* dx, const std::int32_t* targets, nn::dims d, float scale,
                          float* mem, nn::context& ctx) const {
    const std::size_t N = d.rows();
    float* ln_cache = mem;
    float* xn = ln_cache + 2 * N;
    float* dxn = xn + N * C;
    float* z = dxn + N * C;
    float* logits = z + N * V;
    float* scratch = logits + N * V;  // 2C: the copy's (discarded) norm gradient
    const bool shared = kind == head_kind::shared_readout;
    const float* norm_theta = shared ? readout : theta;
    const float* W = shared ? readout + 2 * C : theta + 2 * C;
    norm().forward(norm_theta, x, xn, ln_cache, d, ctx);
    map().forward(W, xn, z, static_cast<float*>(nullptr), d, ctx);
    const float tau = shared ? theta[0] : 1.0f;
    for (std::size_t i = 0; i < N * V; ++i) logits[i] = tau * z[i];
    const double loss = nn::cross_entropy<float>(logits, targets, logits, int(N), V, scale);
    std::fill(dxn, dxn + N * C, 0.0f);
    if (shared) {
      double dtau = 0;  // ∂/∂τ = Σ dlogits · z; dz = τ · dlogits
      for (std::size_t i = 0; i < N * V; ++i) dtau += double(logits[i]) * z[i], logits[i] *= tau;
      dtheta[0] += float(dtau);
      nn::gemm<float>(nn::trans::no, nn::trans::no, int(N), C, V, 1.0f, logits, V, W, C, 1.0f, dxn,
                      C);
      std::fill(scratch, scratch + 2 * C, 0.0f);
      norm().backward(norm_theta, x, dxn, dx, scratch, ln_cache, d, ctx);
    } else {
      map().backward(W, xn, logits, dxn, dtheta + 2 * C, static_cast<const float*>(nullptr), d,
                     ctx);
      norm().backward(norm_theta, x, dxn, dx, dtheta, ln_cache, d, ctx);
    }
    return loss;
  }

 private:
  nn::layer_norm norm() const { return {.C = C}; }
  nn::linear map() const { return {.in = C, .out = V, .bias = false, .init_std = init_std}; }
};

}  // namespace paco::pipeline
