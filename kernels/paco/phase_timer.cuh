#pragma once
// phase_timer: where a device training step spends its time, by phase (the GEMM leaves, attention,
// the elementwise and row-wise leaves, the loss, the optimizer). A cuda_context carries an
// optional pointer to one; the device twins (nn/dispatch.cuh) and the device inner loop open a
// phase_scope around their launches, which records a CUDA event at each end on the context's
// stream. Nested scopes count toward the outermost (attention's own projections are attention).
// Events cost microseconds each: attach a timer for a profiling pass, not for a timed run.
//
//   kernels::phase_timer t;
//   ctx.set_timer(&t);  … steps …  ctx.synchronize();
//   auto ms = t.milliseconds();  // per phase, summed over the recorded scopes
#include <cuda_runtime.h>

#include <array>
#include <string_view>
#include <vector>

namespace paco::kernels {

enum class phase : int { linear = 0, attention, elementwise, loss, optimizer };
inline constexpr int phase_count = 5;
inline constexpr std::string_view phase_name(phase p) {
  constexpr std::string_view n[phase_count] = {"linear", "attention", "elementwise", "loss",
                                               "optimizer"};
  return n[static_cast<int>(p)];
}

class phase_timer {
 public:
  phase_timer() = default;
  phase_timer(const phase_timer&) = delete;
  phase_timer& operator=(const phase_timer&) = delete;
  ~phase_timer() { clear(); }

  // Records the start (open) or the end of a scope of phase p on stream s.
  void record(phase p, bool open, cudaStream_t s) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) return;
    cudaEventRecord(e, s);
    marks_.push_back({p, open, e});
  }
  // Milliseconds per phase over the recorded outermost scopes. Requires: the stream has reached
  // the last record (synchronize first).
  std::array<double, phase_count> milliseconds() const {
    std::array<double, phase_count> ms{};
    int depth = 0;
    const mark* outer = nullptr;
    for (const auto& m : marks_) {
      if (m.open) {
        if (depth++ == 0) outer = &m;
      } else if (depth > 0 && --depth == 0) {
        float t = 0;
        cudaEventElapsedTime(&t, outer->event, m.event);
        ms[static_cast<int>(outer->p)] += t;
      }
    }
    return ms;
  }
  void clear() {
    for (auto& m : marks_) cudaEventDestroy(m.event);
    marks_.clear();
  }

 private:
  struct mark {
    phase p;
    bool open;
    cudaEvent_t event;
  };
  std::vector<mark> marks_;
};

// RAII scope of phase p on stream s; does nothing when t is null.
class phase_scope {
 public:
  phase_scope(phase_timer* t, phase p, cudaStream_t s) : t_(t), p_(p), s_(s) {
    if (t_) t_->record(p_, true, s_);
  }
  ~phase_scope() {
    if (t_) t_->record(p_, false, s_);
  }
  phase_scope(const phase_scope&) = delete;
  phase_scope& operator=(const phase_scope&) = delete;

 private:
  phase_timer* t_;
  phase p_;
  cudaStream_t s_;
};

}  // namespace paco::kernels
