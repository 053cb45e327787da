#pragma once
// cuda_status: a cudaError_t as a paco::status naming the call that failed.
#include <cuda_runtime.h>

#include <string>

#include "paco/core/error.hpp"

namespace paco::kernels {

// Ensures: ok iff e == cudaSuccess; otherwise errc::unsupported naming `what` and CUDA's message.
inline status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return {errc::unsupported,
          std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

// Launch geometry of an element-wise kernel: 256 threads, a grid-stride loop, at most 65535·8
// blocks. Ensures: blocks >= 1.
inline unsigned elementwise_blocks(std::size_t n, unsigned threads = 256) {
  const std::size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b == 0 ? 1 : (b > 65535u * 8u ? 65535u * 8u : b));
}

}  // namespace paco::kernels
