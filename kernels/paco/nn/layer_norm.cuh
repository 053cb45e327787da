#pragma once
// layer_norm on the device (host twin nn::layer_norm): y = (x − mean)·rstd·γ + β per row of C.
// θ = [γ (C) | β (C)], cache = [mean (N) | rstd (N)], as on the host.
//   layer_norm_forward    one warp per row: mean and variance (two passes over the row), y
//   layer_norm_backward   one warp per row for dx; dγ and dβ by column_sums (parallel over rows,
//                         deterministic, no atomics)
#include <cuda_runtime.h>

#include <cstddef>

#include "paco/cuda_check.cuh"
#include "paco/nn/column_sums.cuh"

namespace paco::kernels::nn {

namespace detail {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 8 warps (rows) per block of 256 threads.
template <int = 0>
__global__ void layer_norm_forward_kernel(const float* __restrict__ theta,
                                          const float* __restrict__ x, float* __restrict__ y,
                                          float* __restrict__ mean, float* __restrict__ rstd, int N,
                                          int C, float eps) {
  const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* xr = x + std::size_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += xr[c];
  const float m = warp_sum(s) / float(C);
  float q = 0;
  for (int c = lane; c < C; c += 32) q += (xr[c] - m) * (xr[c] - m);
  const float r = rsqrtf(warp_sum(q) / float(C) + eps);
  float* yr = y + std::size_t(row) * C;
  for (int c = lane; c < C; c += 32) yr[c] = (xr[c] - m) * r * theta[c] + theta[C + c];
  if (lane == 0) mean[row] = m, rstd[row] = r;
}

template <int = 0>
__global__ void layer_norm_dx_kernel(const float* __restrict__ theta, const float* __restrict__ x,
                                     const float* __restrict__ dy, float* __restrict__ dx,
                                     const float* __restrict__ mean, const float* __restrict__ rstd,
                                     int N, int C) {
  const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* xr = x + std::size_t(row) * C;
  const float* dyr = dy + std::size_t(row) * C;
  const float m = mean[row], r = rstd[row];
  float sd = 0, sdx = 0;
  for (int c = lane; c < C; c += 32) {
    const float dn = theta[c] * dyr[c];
    sd += dn;
    sdx += dn * (xr[c] - m) * r;
  }
  sd = warp_sum(sd) / float(C);
  sdx = warp_sum(sdx) / float(C);
  float* dxr = dx + std::size_t(row) * C;
  for (int c = lane; c < C; c += 32) dxr[c] += r * (theta[c] * dyr[c] - sd - (xr[c] - m) * r * sdx);
}

// dγ's and dβ's summands at row n, column c: dy·x̂ and dy.
struct layer_norm_rows {
  const float *x, *dy, *mean, *rstd;
  int C;
  __device__ column_values<2> operator()(int n, int c) const {
    const float g = dy[std::size_t(n) * C + c];
    return {{g * (x[std::size_t(n) * C + c] - mean[n]) * rstd[n], g}};
  }
};

}  // namespace detail

// x, y (N, C); cache (2N). Cost: reads 8NC, writes 4NC bytes.
inline status layer_norm_forward(const float* theta, const float* x, float* y, float* cache, int N,
                                 int C, float eps, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return {};
  detail::layer_norm_forward_kernel<<<(N + 7) / 8, 256, 0, stream>>>(theta, x, y, cache, cache + N,
                                                                     N, C, eps);
  return cuda_status(cudaGetLastError(), "layer_norm_forward launch");
}
// dx (N, C) += …, dθ (2C) += … as on the host; dx may be null. Requires: cache from the forward
// of the same x and θ; partial: device scratch of column_sums_floats(N, C, 2) floats.
inline status layer_norm_backward(const float* theta, const float* x, const float* dy, float* dx,
                                  float* dtheta, const float* cache, int N, int C, float* partial,
                                  cudaStream_t stream) {
  if (N <= 0 || C <= 0) return {};
  if (dx) {
    detail::layer_norm_dx_kernel<<<(N + 7) / 8, 256, 0, stream>>>(theta, x, dy, dx, cache,
                                                                  cache + N, N, C);
    if (auto s = cuda_status(cudaGetLastError(), "layer_norm_backward dx launch"); !s) return s;
  }
  float* const dgb[2] = {dtheta, dtheta + C};
  return column_sums<2>(detail::layer_norm_rows{x, dy, cache, cache + N, C}, N, C, dgb, partial,
                        stream);
}

}  // namespace paco::kernels::nn
