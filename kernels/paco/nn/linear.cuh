#pragma once
// linear on the device (host twin nn::linear): y = x Wᵀ + b, θ = [W (out,in) | b (out)].
//   linear_forward    y = b broadcast over rows, then one GEMM accumulating x Wᵀ
//   linear_backward   dx += dy W and dW += dyᵀ x (two GEMMs); db += Σ_n dy by a column-sum kernel
//                     that adds the rows in a fixed order (deterministic, no atomics)
#include <cuda_runtime.h>

#include <cstddef>

#include "paco/cuda_check.cuh"
#include "paco/nn/gemm.cuh"

namespace paco::kernels::nn {

namespace detail {

template <int = 0>
__global__ void broadcast_rows_kernel(const float* __restrict__ b, float* __restrict__ y,
                                      std::size_t n, int width) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = b[i % width];
}

// db[c] += Σ_n dy[n, c]: blocks of 32 columns × 8 row lanes; lane r sums rows r, r+8, …, then
// the 8 partial sums are added in lane order.
template <int = 0>
__global__ void column_sum_kernel(const float* __restrict__ dy, float* __restrict__ db, int N,
                                  int width) {
  __shared__ float part[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x, r = threadIdx.y;
  float s = 0;
  if (c < width)
    for (int n = r; n < N; n += 8) s += dy[std::size_t(n) * width + c];
  part[r][threadIdx.x] = s;
  __syncthreads();
  if (r == 0 && c < width) {
    float t = 0;
    for (int k = 0; k < 8; ++k) t += part[k][threadIdx.x];
    db[c] += t;
  }
}

}  // namespace detail

// x (N,in) → y (N,out). Cost: 2·N·in·out flops.
inline status linear_forward(cuda_context& ctx, const float* theta, const float* x, float* y, int N,
                             int in, int out, bool bias) {
  if (N <= 0) return {};
  if (bias) {
    const std::size_t n = std::size_t(N) * out;
    detail::broadcast_rows_kernel<<<elementwise_blocks(n), 256, 0, ctx.stream()>>>(
        theta + std::size_t(in) * out, y, n, out);
    if (auto s = cuda_status(cudaGetLastError(), "linear_forward bias launch"); !s) return s;
  }
  using paco::nn::trans;
  return gemm(ctx, trans::no, trans::yes, N, out, in, 1.0f, x, in, theta, in, bias ? 1.0f : 0.0f, y,
              out);
}

// dx (N,in) += dy W (dx may be null); dW += dyᵀ x; db += Σ_n dy. Cost: 4·N·in·out flops.
inline status linear_backward(cuda_context& ctx, const float* theta, const float* x,
                              const float* dy, float* dx, float* dtheta, int N, int in, int out,
                              bool bias) {
  if (N <= 0) return {};
  using paco::nn::trans;
  if (dx)
    if (auto s =
            gemm(ctx, trans::no, trans::no, N, in, out, 1.0f, dy, out, theta, in, 1.0f, dx, in);
        !s)
      return s;
  if (auto s = gemm(ctx, trans::yes, trans::no, out, in, N, 1.0f, dy, out, x, in, 1.0f, dtheta, in);
      !s)
    return s;
  if (!bias) return {};
  detail::column_sum_kernel<<<(out + 31) / 32, dim3(32, 8), 0, ctx.stream()>>>(
      dy, dtheta + std::size_t(in) * out, N, out);
  return cuda_status(cudaGetLastError(), "linear_backward bias launch");
}

}  // namespace paco::kernels::nn
