#pragma once
// replica<Model>: one model replica's training step on `threads` cores. Each batch of B
// sequences is split across threads by sequence; every thread runs forward + backward on its
// share with its own workspace and gradient buffer (single-threaded GEMMs), then the gradients
// are summed in parallel into the arena's grad plane. Nothing is allocated per step.
//
// Model requires: layout(), make_workspace(dims), forward_backward(θ, ∇, tokens, targets, ws,
// scale) that accumulates scale·∇(mean loss), and loss(θ, tokens, targets, ws).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/thread_pool.hpp"
#include "paco/nn/gemm.hpp"

namespace paco::nn {

template <class Model>
class replica {
 public:
  using workspace = typename Model::workspace;

  // Requires: B ≥ 1, T ≥ 1, threads ≥ 1. Threads beyond B are not used.
  replica(const Model& model, int B, int T, int threads)
      : model_(model), B_(B), T_(T), pool_(std::max(1, std::min(threads, B))) {
    gemm_single_threaded();
    const int n = pool_.size();
    for (int i = 0; i < n; ++i) {
      const int b0 = B * i / n, b1 = B * (i + 1) / n;
      shares_.push_back({b0, b1});
      ws_.push_back(model.make_workspace(dims{b1 - b0, T}));
      if (i > 0) grads_.emplace_back(model.layout().total());
    }
  }

  int threads() const noexcept { return pool_.size(); }
  dims batch() const noexcept { return {B_, T_}; }
  thread_pool& pool() noexcept { return pool_; }

  // Zeroes a's grad plane, then writes ∇ of the mean loss over the batch into it.
  // tokens, targets: (B,T). Returns the mean loss (nats/token).
  double forward_backward(arena<host>& a, const std::int32_t* tokens, const std::int32_t* targets) {
    const float* theta = a.get(plane::param).data();
    float* g0 = a.get(plane::grad).data();
    const std::size_t P = a.layout().total();
    std::vector<double> losses(pool_.size());
    pool_.run([&](int i) {
      const auto [b0, b1] = shares_[i];
      float* g = i == 0 ? g0 : grads_[i - 1].data();
      if (i == 0) std::fill(g0, g0 + P, 0.0f);  // the others were zeroed by the last reduction
      const std::size_t off = std::size_t(b0) * T_;
      losses[i] = model_.forward_backward(theta, g, tokens + off, targets + off, ws_[i],
                                          float(b1 - b0) / float(B_)) *
                  (b1 - b0) / B_;
    });
    if (pool_.size() > 1) {
      pool_.run([&](int i) {  // thread i sums its chunk of every buffer into g0 and zeroes it
        const std::size_t c0 = chunk(P, i), c1 = chunk(P, i + 1);
        for (auto& gb : grads_) {
          float* g = gb.data();
          for (std::size_t k = c0; k < c1; ++k) g0[k] += g[k], g[k] = 0.0f;
        }
      });
    }
    double l = 0;
    for (double x : losses) l += x;
    return l;
  }

  // Mean loss over the batch without gradients.
  double loss(const arena<host>& a, const std::int32_t* tokens, const std::int32_t* targets) {
    const float* theta = a.get(plane::param).data();
    std::vector<double> losses(pool_.size());
    pool_.run([&](int i) {
      const auto [b0, b1] = shares_[i];
      const std::size_t off = std::size_t(b0) * T_;
      losses[i] = model_.loss(theta, tokens + off, targets + off, ws_[i]) * (b1 - b0) / B_;
    });
    double l = 0;
    for (double x : losses) l += x;
    return l;
  }

  // Runs f(begin, end) over [0, n) split into one contiguous chunk per thread.
  template <class F>
  void for_chunks(std::size_t n, F&& f) {
    pool_.run([&](int i) { f(chunk(n, i), chunk(n, i + 1)); });
  }

 private:
  std::size_t chunk(std::size_t n, int i) const {
    // 16-element aligned boundaries.
    std::size_t c = n * std::size_t(i) / std::size_t(pool_.size());
    return i == pool_.size() ? n : c / 16 * 16;
  }
  struct share {
    int b0, b1;
  };
  const Model& model_;
  int B_, T_;
  thread_pool pool_;
  std::vector<share> shares_;
  std::vector<workspace> ws_;
  std::vector<buffer<float>> grads_;
};

}  // namespace paco::nn
