#pragma once
// linear on the device (host twin nn::linear): y = x Wᵀ + b, θ = [W (out,in) | b (out)].
//   linear_forward    y = b broadcast over rows, then one GEMM accumulating x Wᵀ
//   linear_backward   dx += dy W and dW += dyᵀ x (two GEMMs); db += Σ_n dy by column_sums
//                     (parallel over rows, deterministic, no atomics)
#include <cuda_runtime.h>

#include <cstddef>

#include "paco/cuda_check.cuh"
#include "paco/nn/column_sums.cuh"
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

// dy's row n, column c: the bias gradient's summand.
struct bias_rows {
  const float* dy;
  int width;
  __device__ column_values<1> operator()(int n, int c) const {
    return {{dy[std::size_t(n) * width + c]}};
  }
};

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
  float* const db[1] = {dtheta + std::size_t(in) * out};
  return column_sums<1>(detail::bias_rows{dy, out}, N, out, db,
                        ctx.partials(column_sums_floats(N, out, 1)), ctx.stream());
}

}  // namespace paco::kernels::nn
