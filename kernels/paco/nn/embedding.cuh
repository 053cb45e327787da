#pragma once
// embedding on the device (host twin nn::embedding): token plus learned position embedding.
// θ = [wte (V, C) | wpe (ctx, C)]; x = token ids (B, T); y (B·T, C).
//   embedding_forward    y[b,t] = wte[x[b,t]] + wpe[t], one thread per element
//   embedding_backward   dwpe[t] += Σ_b dy[b,t] (one thread per (t, c)); dwte[v] += Σ_{x=v} dy
//                        (one thread per column c, the rows in order: deterministic, no atomics)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "paco/cuda_check.cuh"

namespace paco::kernels::nn {

namespace detail {

template <int = 0>
__global__ void embedding_forward_kernel(const float* __restrict__ theta,
                                         const std::int32_t* __restrict__ x, float* __restrict__ y,
                                         int B, int T, int V, int C) {
  const std::size_t total = std::size_t(B) * T * C;
  const float* wpe = theta + std::size_t(V) * C;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t n = i / C;
    const int c = int(i % C), t = int(n % T);
    y[i] = theta[std::size_t(x[n]) * C + c] + wpe[std::size_t(t) * C + c];
  }
}

template <int = 0>
__global__ void embedding_dwpe_kernel(const float* __restrict__ dy, float* __restrict__ dwpe, int B,
                                      int T, int C) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i >= std::size_t(T) * C) return;
  const int t = int(i / C), c = int(i % C);
  float s = 0;
  for (int b = 0; b < B; ++b) s += dy[(std::size_t(b) * T + t) * C + c];
  dwpe[i] += s;
}

template <int = 0>
__global__ void embedding_dwte_kernel(const std::int32_t* __restrict__ x,
                                      const float* __restrict__ dy, float* __restrict__ dwte, int N,
                                      int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int n = 0; n < N; ++n) dwte[std::size_t(x[n]) * C + c] += dy[std::size_t(n) * C + c];
}

}  // namespace detail

// Requires: 0 ≤ x < V, T ≤ ctx (the host module checks both). Cost: reads 8BTC, writes 4BTC.
inline status embedding_forward(const float* theta, const std::int32_t* x, float* y, int B, int T,
                                int V, int C, cudaStream_t stream) {
  const std::size_t n = std::size_t(B) * T * C;
  if (n == 0) return {};
  detail::embedding_forward_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(theta, x, y, B, T, V,
                                                                              C);
  return cuda_status(cudaGetLastError(), "embedding_forward launch");
}
// dθ (V·C + ctx·C) += the gradients of wte and wpe (no dx: the input is ids).
inline status embedding_backward(const std::int32_t* x, const float* dy, float* dtheta, int B,
                                 int T, int V, int C, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return {};
  const std::size_t tc = std::size_t(T) * C;
  detail::embedding_dwpe_kernel<<<unsigned((tc + 255) / 256), 256, 0, stream>>>(
      dy, dtheta + std::size_t(V) * C, B, T, C);
  if (auto s = cuda_status(cudaGetLastError(), "embedding_backward dwpe launch"); !s) return s;
  detail::embedding_dwte_kernel<<<(C + 255) / 256, 256, 0, stream>>>(x, dy, dtheta, B * T, C);
  return cuda_status(cudaGetLastError(), "embedding_backward dwte launch");
}

}  // namespace paco::kernels::nn
