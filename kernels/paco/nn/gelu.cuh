#pragma once
// gelu on the device: the tanh approximation of GPT-2, element-wise (host twin nn::gelu).
//   gelu_forward    y = ½x(1 + tanh(k0(x + k1x³)))
//   gelu_backward   dx += dy · gelu'(x)
// Grid-stride loops of 256 threads on a stream; no scratch, no allocation.
#include <cuda_runtime.h>

#include <cstddef>

#include "paco/cuda_check.cuh"

namespace paco::kernels::nn {

namespace detail {

inline constexpr float gelu_k0 = 0.7978845608028654f;  // sqrt(2/π), nn::gelu::k0
inline constexpr float gelu_k1 = 0.044715f;            // nn::gelu::k1

template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void gelu_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                    std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(gelu_k0 * (v + gelu_k1 * v * v * v)));
  }
}
template <int = 0>
__global__ void gelu_backward_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                     float* __restrict__ dx, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const float th = tanhf(gelu_k0 * (v + gelu_k1 * v * v * v));
    dx[i] += dy[i] * (0.5f * (1.0f + th) +
                      0.5f * v * (1.0f - th * th) * (gelu_k0 * (1.0f + 3.0f * gelu_k1 * v * v)));
  }
}

}  // namespace detail

// y (n) = gelu(x). Cost: reads 4n, writes 4n bytes.
inline status gelu_forward(const float* x, float* y, std::size_t n, cudaStream_t stream) {
  if (n == 0) return {};
  detail::gelu_forward_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, y, n);
  return cuda_status(cudaGetLastError(), "gelu_forward launch");
}
// dx (n) += dy · gelu'(x); nothing when dx is null. Cost: reads 12n, writes 4n bytes.
inline status gelu_backward(const float* x, const float* dy, float* dx, std::size_t n,
                            cudaStream_t stream) {
  if (n == 0 || !dx) return {};
  detail::gelu_backward_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, dy, dx, n);
  return cuda_status(cudaGetLastError(), "gelu_backward launch");
}

}  // namespace paco::kernels::nn
