#pragma once
// cuda_context: what a path worker's device work runs on (the role of nn::context on the host):
// one CUDA stream, a cuBLAS handle bound to it, and a scratch workspace that launchers take
// from instead of calling cudaMalloc on the hot path. One per worker thread; move-only.
//
//   auto ctx = kernels::cuda_context::make(0, 64 << 20).value_or_throw();
//   upload(host_arena, dev_arena, plane::param, ctx.stream(), &log);
//   ctx.scratch().reset();  // between steps
//   ctx.synchronize();
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "paco/core/error.hpp"
#include "paco/cuda_buffer.cuh"
#include "paco/cuda_check.cuh"
#include "paco/scratch.cuh"

namespace paco::kernels {

// Ensures: ok iff s == CUBLAS_STATUS_SUCCESS; otherwise errc::unsupported naming `what`.
inline status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return {errc::unsupported, std::string(what) + ": " + cublasGetStatusName(s) + " (" +
                                 cublasGetStatusString(s) + ")"};
}

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
    return std::move(c);  // spelled out: not every front end moves into result<> implicitly
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
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  buffer<std::byte, cuda> workspace_;
  scratch_arena scratch_;
};

}  // namespace paco::kernels
