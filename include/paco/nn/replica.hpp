#pragma once
// replica<Model>: one model replica's training step on `threads` cores. Each batch of B
// sequences is cut into chunks (2 per thread when threads > 1); threads take chunks from a shared
// counter, so a thread that the OS slows down simply takes fewer (robust on shared machines).
// Each chunk runs forward + backward with single-threaded GEMMs into its own gradient buffer, and
// the buffers are summed in chunk order: the result does not depend on which thread ran which
// chunk (bit-reproducible). Nothing is allocated per step.
//
// Model requires (the part of nn::Model that a step uses): layout(), make_workspace(dims),
// forward_backward(θ, ∇, tokens, targets, ws, scale) that accumulates scale·∇(mean loss), and
// loss(θ, tokens, targets, ws).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/thread_pool.hpp"
#include "paco/nn/concepts.hpp"
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
    const int n = pool_.size() == 1 ? 1 : std::min(B, 2 * pool_.size());
    for (int c = 0; c < n; ++c) {
      chunks_.push_back({B * c / n, B * (c + 1) / n});
      if (c > 0) grads_.emplace_back(model.layout().total());
    }
    // One workspace per thread and distinct chunk size (at most two sizes).
    ws_.resize(pool_.size());
    for (auto& per_thread : ws_)
      for (auto& ch : chunks_) {
        const int b = ch.b1 - ch.b0;
        bool have = false;
        for (auto& w : per_thread) have |= w.d.B == b;
        if (!have) per_thread.push_back(model.make_workspace(dims{b, T}));
      }
  }

  int threads() const noexcept { return pool_.size(); }
  int chunks() const noexcept { return int(chunks_.size()); }
  dims batch() const noexcept { return {B_, T_}; }
  thread_pool& pool() noexcept { return pool_; }

  // Zeroes a's grad plane, then writes ∇ of the mean loss over the batch into it.
  // tokens, targets: (B,T). Returns the mean loss (nats/token).
  double forward_backward(arena<host>& a, const std::int32_t* tokens, const std::int32_t* targets) {
    const float* theta = a.get(plane::param).data();
    float* g0 = a.get(plane::grad).data();
    const std::size_t P = a.layout().total();
    std::vector<double> losses(chunks_.size());
    std::fill(g0, g0 + P, 0.0f);  // the others were zeroed by the last reduction
    run_chunks([&](int c, int thread) {
      const auto [b0, b1] = chunks_[c];
      float* g = c == 0 ? g0 : grads_[c - 1].data();
      const std::size_t off = std::size_t(b0) * T_;
      losses[c] =
          model_.forward_backward(theta, g, tokens + off, targets + off,
                                  workspace_for(thread, b1 - b0), float(b1 - b0) / float(B_)) *
          (b1 - b0) / B_;
    });
    if (!grads_.empty()) {
      pool_.run([&](int i) {  // thread i sums its slice of every buffer, in chunk order
        const std::size_t c0 = slice_at(P, i), c1 = slice_at(P, i + 1);
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
    std::vector<double> losses(chunks_.size());
    run_chunks([&](int c, int thread) {
      const auto [b0, b1] = chunks_[c];
      const std::size_t off = std::size_t(b0) * T_;
      losses[c] = model_.loss(theta, tokens + off, targets + off, workspace_for(thread, b1 - b0)) *
                  (b1 - b0) / B_;
    });
    double l = 0;
    for (double x : losses) l += x;
    return l;
  }

  // Runs f(begin, end) over [0, n) split into one contiguous chunk per thread.
  template <class F>
  void for_chunks(std::size_t n, F&& f) {
    pool_.for_ranges(n, std::forward<F>(f));
  }

 private:
  // Runs f(chunk, thread) for every chunk; threads take the next chunk from a shared counter.
  template <class F>
  void run_chunks(F&& f) {
    std::atomic<int> next{0};
    pool_.run([&](int thread) {
      for (int c; (c = next.fetch_add(1)) < int(chunks_.size());) f(c, thread);
    });
  }
  workspace& workspace_for(int thread, int b) {
    for (auto& w : ws_[thread])
      if (w.d.B == b) return w;
    PACO_ASSERT(false, "no workspace for this chunk size");
    return ws_[thread].front();
  }
  std::size_t slice_at(std::size_t n, int i) const {
    return thread_pool::range_begin(n, i, pool_.size());
  }
  struct chunk_t {
    int b0, b1;
  };
  const Model& model_;
  int B_, T_;
  thread_pool pool_;
  std::vector<chunk_t> chunks_;
  std::vector<std::vector<workspace>> ws_;  // per thread, one per distinct chunk size
  std::vector<buffer<float>> grads_;        // chunks 1 … n−1 (chunk 0 writes into the arena)
};

}  // namespace paco::nn
