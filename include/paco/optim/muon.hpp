#pragma once
// muon: momentum orthogonalised by Newton–Schulz for the hidden weight matrices, AdamW for every
// other parameter (embeddings, norms, biases, the head), as Muon's reference code
// (github.com/KellerJordan/Muon, muon.py) does. Per hidden matrix W (rows × cols) with gradient G:
//   B ← μ·B + (1−μ)·G                          (momentum, in plane::moment1)
//   U ← nesterov ? (1−μ)·G + μ·B : B
//   O ← NS₅(U)                                 (≈ the orthogonal polar factor of U)
//   W ← W·(1 − lr·wd) − lr·√max(1, rows/cols)·O
// NS₅ is the reference's quintic iteration: X ← U/(‖U‖_F + 1e-7) (all singular values ≤ 1, the
// scaling that keeps it safe in bf16), then 5 times X ← a·X + (b·A + c·A²)·X with A = X·Xᵀ on
// the wide orientation, (a, b, c) = (3.4445, −4.7750, 2.0315): each singular value σ goes through
// p(σ) = aσ + bσ³ + cσ⁵ while the singular vectors stay. paco computes it in fp32 (the reference
// in bf16 on a GPU).
//
// Learning rates: the inner loop hands step() the schedule's rate lr_t for the AdamW part (whose
// peak is aux.lr); the matrices follow the same schedule scaled to their own peak `lr`
// (lr·lr_t/aux.lr), as the reference scales every group by one schedule.
//
// Which tensors are hidden matrices is the caller's list (`matrices`); hidden_matrices() picks
// the 2-D tensors of a model's named tensors other than the embedding tables and the head.
// State: moment1 (the matrices' momentum, AdamW's m elsewhere), moment2 (AdamW's v; unused on
// the matrices), so it travels with the worker's checkpoint as AdamW's does.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/param_layout.hpp"
#include "paco/core/thread_pool.hpp"
#include "paco/nn/gemm.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/optim/concepts.hpp"

namespace paco::optim {

// A row-major matrix inside an arena plane.
struct matrix_span {
  std::size_t offset = 0;  // elements from the start of the plane
  std::size_t rows = 0, cols = 0;
  std::size_t size() const noexcept { return rows * cols; }
};

// The 2-D tensors of `tensors` other than the embedding tables and the head (nn::block_lm's
// wte.weight, wpe.weight and lm_head.weight): what Muon's authors orthogonalise. Ordered by
// offset.
inline std::vector<matrix_span> hidden_matrices(std::span<const named_tensor> tensors) {
  std::vector<matrix_span> out;
  for (auto& t : tensors) {
    if (t.shape.size() != 2 || t.shape[0] < 2 || t.shape[1] < 2) continue;
    if (t.name == "wte.weight" || t.name == "wpe.weight" || t.name == "lm_head.weight") continue;
    out.push_back({t.offset, t.shape[0], t.shape[1]});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
  return out;
}

// The reference's quintic coefficients.
inline constexpr float ns_a = 3.4445f, ns_b = -4.7750f, ns_c = 2.0315f;

// p(σ) = aσ + bσ³ + cσ⁵ applied `steps` times to a singular value σ of the normalised input: what
// newton_schulz does to each singular value (the test's second implementation works through it).
inline double newton_schulz_scalar(double s, int steps) {
  for (int k = 0; k < steps; ++k) s = ns_a * s + ns_b * s * s * s + ns_c * s * s * s * s * s;
  return s;
}

// Working memory of newton_schulz for a matrix of n elements with min(rows, cols) = r.
struct ns_workspace {
  std::vector<float> x, y, a, b;
  void fit(std::size_t n, std::size_t r) {
    x.resize(n);
    y.resize(n);
    a.resize(r * r);
    b.resize(r * r);
  }
};

// out (rows × cols) ← NS_steps(u): u normalised by its Frobenius norm, then `steps` quintic
// iterations on the wide orientation (r = min(rows, cols) rows). u and out may be the same.
// Requires: u and out hold rows·cols floats. Cost: steps·(4·r²·c + 2·r³) flops.
inline void newton_schulz(const float* u, float* out, std::size_t rows, std::size_t cols, int steps,
                          ns_workspace& w) {
  const bool tall = rows > cols;
  const std::size_t r = tall ? cols : rows, c = tall ? rows : cols, n = rows * cols;
  w.fit(n, r);
  double sq = 0;
  for (std::size_t i = 0; i < n; ++i) sq += double(u[i]) * u[i];
  const float inv = float(1.0 / (std::sqrt(sq) + 1e-7));
  float* x = w.x.data();
  if (tall) {  // x = uᵀ (cols × rows)
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) x[j * rows + i] = u[i * cols + j] * inv;
  } else {
    for (std::size_t i = 0; i < n; ++i) x[i] = u[i] * inv;
  }
  const int R = int(r), C = int(c);
  float* y = w.y.data();
  for (int k = 0; k < steps; ++k) {
    nn::gemm(nn::trans::no, nn::trans::yes, R, R, C, 1.0f, x, C, x, C, 0.0f, w.a.data(), R);
    // b = b·A + c·A²
    nn::gemm(nn::trans::no, nn::trans::no, R, R, R, ns_c, w.a.data(), R, w.a.data(), R, 0.0f,
             w.b.data(), R);
    for (std::size_t i = 0; i < r * r; ++i) w.b[i] += ns_b * w.a[i];
    // y = a·x + b·x
    std::copy(x, x + n, y);
    nn::gemm(nn::trans::no, nn::trans::no, R, C, R, 1.0f, w.b.data(), R, x, C, ns_a, y, C);
    std::swap(x, y);
  }
  if (tall) {
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) out[i * cols + j] = x[j * rows + i];
  } else {
    std::copy(x, x + n, out);
  }
}

struct muon {
  using inner_optimizer_tag = void;

  float lr = 0.02f;  // the matrices' peak learning rate
  float momentum = 0.95f;
  bool nesterov = true;
  float weight_decay = 0.0f;  // on the matrices (the reference's default)
  int ns_steps = 5;
  adamw aux{};  // every element outside the matrices; aux.lr is the schedule's peak
  std::vector<matrix_span> matrices;

  status validate() const {
    auto bad = [](const char* f, const char* r) {
      return status(errc::invalid_argument, std::string("muon.") + f + " must be in " + r);
    };
    if (!(lr >= 0)) return bad("lr", "[0, inf)");
    if (!(momentum >= 0 && momentum < 1)) return bad("momentum", "[0, 1)");
    if (!(weight_decay >= 0)) return bad("weight_decay", "[0, inf)");
    if (ns_steps < 1 || ns_steps > 20) return bad("ns_steps", "[1, 20]");
    if (!(aux.lr > 0)) return bad("aux.lr (the schedule's peak)", "(0, inf)");
    for (std::size_t i = 0; i < matrices.size(); ++i)
      if (matrices[i].rows == 0 || matrices[i].cols == 0 ||
          (i > 0 && matrices[i].offset < matrices[i - 1].offset + matrices[i - 1].size()))
        return {errc::invalid_argument,
                "muon.matrices: matrix " + std::to_string(i) + " is empty or overlaps another"};
    return {};
  }

  // One step at step t ≥ 1 with the schedule's rate lr_t, on `pool`'s threads: the AdamW part
  // split by elements, the matrices one per thread (each computed alone, so the result does not
  // depend on the thread count). Requires: the matrices lie inside the arena.
  void step(arena<host>& a, long t, float lr_t, thread_pool& pool) const {
    const std::size_t n = a.get(plane::param).size();
    PACO_ASSERT(matrices.empty() || matrices.back().offset + matrices.back().size() <= n,
                "muon: a matrix lies outside the arena");
    a.get(plane::moment1), a.get(plane::moment2), a.get(plane::grad);  // allocated before threads
    const auto gaps = aux_ranges(n);
    std::atomic<std::size_t> next{0};
    const float lr_m = lr * lr_t / aux.lr;
    pool.run([&](int i) {
      for (auto [b, e] : gaps)
        aux.step(a, b + thread_pool::range_begin(e - b, i, pool.size()),
                 b + thread_pool::range_begin(e - b, i + 1, pool.size()), t, lr_t);
      ns_workspace w;
      std::vector<float> u;
      for (std::size_t k; (k = next.fetch_add(1)) < matrices.size();)
        step_matrix(a, matrices[k], lr_m, u, w);
    });
  }
  // The same on the calling thread alone.
  void step(arena<host>& a, long t, float lr_t) const {
    thread_pool one(1);
    step(a, t, lr_t, one);
  }

 private:
  // [begin, end) ranges of the plane outside every matrix.
  std::vector<std::pair<std::size_t, std::size_t>> aux_ranges(std::size_t n) const {
    std::vector<std::pair<std::size_t, std::size_t>> r;
    std::size_t at = 0;
    for (auto& m : matrices) {
      if (m.offset > at) r.push_back({at, m.offset});
      at = m.offset + m.size();
    }
    if (at < n) r.push_back({at, n});
    return r;
  }

  void step_matrix(arena<host>& a, const matrix_span& m, float lr_m, std::vector<float>& u,
                   ns_workspace& w) const {
    const std::size_t n = m.size();
    float* theta = a.get(plane::param).data() + m.offset;
    const float* g = a.get(plane::grad).data() + m.offset;
    float* buf = a.get(plane::moment1).data() + m.offset;
    u.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      buf[i] = momentum * buf[i] + (1 - momentum) * g[i];
      u[i] = nesterov ? (1 - momentum) * g[i] + momentum * buf[i] : buf[i];
    }
    newton_schulz(u.data(), u.data(), m.rows, m.cols, ns_steps, w);
    const float scale = lr_m * std::sqrt(std::max(1.0f, float(m.rows) / float(m.cols)));
    const float decay = 1 - lr_m * weight_decay;
    for (std::size_t i = 0; i < n; ++i) theta[i] = theta[i] * decay - scale * u[i];
  }
};

static_assert(PooledInnerOptimizer<muon>);

// Muon over a model's hidden matrices (hidden_matrices of model.tensors()), the rest with `aux`.
template <class Model>
muon muon_for(const Model& model, muon m) {
  const auto t = model.tensors();
  m.matrices = hidden_matrices(t);
  return m;
}

}  // namespace paco::optim
