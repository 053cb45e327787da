#pragma once
// layer_norm on the device (host twin nn::layer_norm): y = (x − mean)·rstd·γ + β per row of C.
// θ = [γ (C) | β (C)], cache = [mean (N) | rstd (N)], as on the host.
//   layer_norm_forward    one warp per row: mean and variance (two passes over the row), y
//   layer_norm_backward   one warp per row for dx; one thread per column for dγ and dβ, summing
//                         the rows in order (deterministic, no atomics)
#include <cuda_runtime.h>

#include <cstddef>

#include "paco/cuda_check.cuh"

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

template <int = 0>
__global__ void layer_norm_dtheta_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                         float* __restrict__ dtheta, const float* __restrict__ mean,
                                         const float* __restrict__ rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dg = 0, db = 0;
  for (int n = 0; n < N; ++n) {
    const float g = dy[std::size_t(n) * C + c];
    dg += g * (x[std::size_t(n) * C + c] - mean[n]) * rstd[n];
    db += g;
  }
  dtheta[c] += dg;
  dtheta[C + c] += db;
}

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
// of the same x and θ.
inline status layer_norm_backward(const float* theta, const float* x, const float* dy, float* dx,
                                  float* dtheta, const float* cache, int N, int C,
                                  cudaStream_t stream) {
  if (N <= 0 || C <= 0) return {};
  if (dx) {
    detail::layer_norm_dx_kernel<<<(N + 7) / 8, 256, 0, stream>>>(theta, x, dy, dx, cache,
                                                                  cache + N, N, C);
    if (auto s = cuda_status(cudaGetLastError(), "layer_norm_backward dx launch"); !s) return s;
  }
  detail::layer_norm_dtheta_kernel<<<(C + 255) / 256, 256, 0, stream>>>(x, dy, dtheta, cache,
                                                                        cache + N, N, C);
  return cuda_status(cudaGetLastError(), "layer_norm_backward dθ launch");
}

}  // namespace paco::kernels::nn
