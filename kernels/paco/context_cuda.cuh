#pragma once
// cuda_context: what a path worker's device work runs on (the role of nn::context on the host):
// one CUDA stream, a cuBLAS handle bound to it, the GEMM precision, and a scratch workspace that
// launchers take from instead of calling cudaMalloc on the hot path. One per worker thread;
// move-only. The nn composites use it as they use nn::context: take<T>(n) and frame.
//
//   auto ctx = kernels::cuda_context::make(0, 64 << 20).value_or_throw();
//   upload(host_arena, dev_arena, plane::param, ctx.stream(), &log);
//   ctx.scratch().reset();  // between steps
//   ctx.synchronize();
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <utility>

#include "paco/core/error.hpp"
#include "paco/cuda_buffer.cuh"
#include "paco/cuda_check.cuh"
#include "paco/phase_timer.cuh"
#include "paco/scratch.cuh"

namespace paco::kernels {

// Ensures: ok iff s == CUBLAS_STATUS_SUCCESS; otherwise errc::unsupported naming `what`.
inline status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return {errc::unsupported, std::string(what) + ": " + cublasGetStatusName(s) + " (" +
                                 cublasGetStatusString(s) + ")"};
}

// The arithmetic of device GEMMs (every linear, attention and lm_head product):
//   fp32  IEEE fp32 products and sums (CUBLAS_COMPUTE_32F): the parity mode against the host
//   tf32  fp32 in and out, TF32 tensor-core products, fp32 accumulation (10-bit mantissa inputs)
//   bf16  the linear and lm_head GEMMs cast their fp32 operands to bf16 (round to nearest even)
//         and multiply on bf16 tensor cores with fp32 accumulation into the fp32 output; master
//         weights, gradients, moments and activations stay fp32. Attention's batched products
//         run in TF32.
enum class gemm_math { fp32, tf32, bf16 };

class cuda_context {
 public:
  // A context on `device` with `workspace_bytes` of scratch. Errors: errc::unsupported naming
  // the CUDA or cuBLAS call that failed (no device, out of memory, no cuBLAS).
  static result<cuda_context> make(int device = 0, std::size_t workspace_bytes = 32u << 20) {
    if (auto s = cuda_status(cudaSetDevice(device), "cudaSetDevice"); !s) return s.error();
    cuda_context c;
    c.device_ = device;
    if (auto s = cuda_status(cudaStreamCreateWithFlags(&c.stream_, cudaStreamNonBlocking),
                             "cudaStreamCreate");
        !s)
      return s.error();
    if (auto s = cublas_status(cublasCreate(&c.blas_), "cublasCreate"); !s) return s.error();
    if (auto s = cublas_status(cublasSetStream(c.blas_, c.stream_), "cublasSetStream"); !s)
      return s.error();
    try {
      c.workspace_.resize(workspace_bytes);
    } catch (const std::bad_alloc&) {
      return error(errc::unsupported, "cuda_context: no room for a workspace of " +
                                          std::to_string(workspace_bytes) + " bytes");
    }
    c.scratch_ = scratch_arena(c.workspace_.data(), c.workspace_.size());
    return result<cuda_context>(std::move(c));  // spelled out: nvcc does not move implicitly
  }

  cuda_context(cuda_context&& o) noexcept { swap(o); }
  cuda_context& operator=(cuda_context&& o) noexcept {
    swap(o);
    return *this;
  }
  cuda_context(const cuda_context&) = delete;
  cuda_context& operator=(const cuda_context&) = delete;
  ~cuda_context() {
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int device() const noexcept { return device_; }
  cudaStream_t stream() const noexcept { return stream_; }
  cublasHandle_t blas() const noexcept { return blas_; }
  scratch_arena& scratch() noexcept { return scratch_; }
  gemm_math math() const noexcept { return math_; }
  void set_math(gemm_math m) noexcept { math_ = m; }
  // The profiling timer the device twins record their phases into (null: none, the default).
  // Requires: t outlives its use here.
  phase_timer* timer() const noexcept { return timer_; }
  void set_timer(phase_timer* t) noexcept { timer_ = t; }
  // A scope of phase p on this context's stream (recorded only when a timer is set).
  phase_scope scope(phase p) const { return phase_scope(timer_, p, stream_); }

  // Ensures: the workspace holds at least `bytes`; a larger one is allocated (contents and
  // earlier scratch pointers are lost: call between steps only, after synchronize()).
  void reserve(std::size_t bytes) {
    if (bytes <= workspace_.size()) return;
    workspace_.resize(bytes);
    scratch_ = scratch_arena(workspace_.data(), workspace_.size());
  }

  // Device room for n 16-bit values (bf16 GEMM operands), valid until the next call. Grows the
  // staging buffer when needed, after waiting for the stream (so in a first step only).
  // Throws std::bad_alloc when the device has no room.
  std::uint16_t* staging(std::size_t n) {
    if (n > staging_.size()) {
      synchronize().throw_if_error();
      staging_.resize(n + n / 4);
    }
    return staging_.data();
  }

  // Device room for n floats of reduction partials (column_sums), valid until the next call;
  // grows as staging() does.
  float* partials(std::size_t n) {
    if (n > partials_.size()) {
      synchronize().throw_if_error();
      partials_.resize(n + n / 4);
    }
    return partials_.data();
  }

  // n elements of T from the workspace, 256-byte aligned, contents unspecified, valid until the
  // enclosing frame ends. Throws std::bad_alloc when the workspace is exhausted (reserve the
  // modules' scratch_bytes).
  template <class T>
  T* take(std::size_t n) {
    void* p = scratch_.take(n * sizeof(T));
    if (!p && n) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  // RAII mark: everything taken after it is given back at scope exit (nn::context::frame).
  class frame {
   public:
    explicit frame(cuda_context& c) : s_(c.scratch_), mark_(c.scratch_.mark()) {}
    ~frame() { s_.rewind(mark_); }
    frame(const frame&) = delete;
    frame& operator=(const frame&) = delete;

   private:
    scratch_arena& s_;
    std::size_t mark_;
  };

  // Ensures: every operation ordered on stream() so far has finished. Errors: the first
  // asynchronous error of that work, naming it.
  status synchronize() const {
    return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  cuda_context() = default;
  void swap(cuda_context& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(stream_, o.stream_);
    std::swap(blas_, o.blas_);
    std::swap(workspace_, o.workspace_);
    std::swap(scratch_, o.scratch_);
    std::swap(math_, o.math_);
    std::swap(timer_, o.timer_);
    std::swap(staging_, o.staging_);
    std::swap(partials_, o.partials_);
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  buffer<std::byte, cuda> workspace_;
  scratch_arena scratch_;
  gemm_math math_ = gemm_math::fp32;
  phase_timer* timer_ = nullptr;
  buffer<std::uint16_t, cuda> staging_;
  buffer<float, cuda> partials_;
};

}  // namespace paco::kernels
