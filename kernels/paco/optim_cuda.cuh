#pragma once
// The inner optimizer's step on the device, over arena<cuda>'s planes (host twins: optim/clip.hpp
// and optim/adamw.hpp):
//   clip_grad_norm   ‖g‖₂ in double by fixed-size block partials summed in order (deterministic),
//                    then g ← g·max/(‖g‖+1e-6) when ‖g‖ > max, the factor read on the device: no
//                    host round trip
//   adamw_step       optim::adamw's update of θ, m, v from g (formula::adamw_step per element,
//                    scalars from formula::make_adamw_scalars, as on the host)
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "paco/arena_cuda.cuh"
#include "paco/context_cuda.cuh"
#include "paco/cuda_check.cuh"
#include "paco/elementwise.cuh"
#include "paco/optim/adamw.hpp"

namespace paco::kernels {

namespace detail {

inline constexpr int norm_blocks = 512;  // fixed: the partial sums' order never depends on n

template <int = 0>
__global__ void sum_squares_kernel(const float* __restrict__ g, std::size_t n,
                                   double* __restrict__ partial) {
  __shared__ double sh[256];
  double s = 0;
  for (std::size_t i = blockIdx.x * std::size_t(256) + threadIdx.x; i < n;
       i += std::size_t(norm_blocks) * 256)
    s += double(g[i]) * g[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (int(threadIdx.x) < k) sh[threadIdx.x] += sh[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

// norm[0] = √Σ partial; factor[0] = max/(norm+1e-6) if norm > max > 0, else 1.
template <int = 0>
__global__ void norm_factor_kernel(const double* __restrict__ partial, double max_norm,
                                   double* __restrict__ norm, float* __restrict__ factor) {
  __shared__ double sh[256];
  double s = 0;
  for (int i = threadIdx.x; i < norm_blocks; i += 256) s += partial[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (int(threadIdx.x) < k) sh[threadIdx.x] += sh[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double nrm = sqrt(sh[0]);
    *norm = nrm;
    *factor = max_norm > 0 && nrm > max_norm ? float(max_norm / (nrm + 1e-6)) : 1.0f;
  }
}

template <int = 0>
__global__ void scale_by_kernel(float* __restrict__ g, std::size_t n,
                                const float* __restrict__ factor) {
  const float c = *factor;
  if (c == 1.0f) return;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    g[i] *= c;
}

}  // namespace detail

// Ensures: once the stream reaches it, *norm (device double; may be null) is ‖g‖₂ before
// clipping and g is clipped to max_norm (max_norm ≤ 0: measured only). Scratch: 4 KiB + 256 B.
inline status clip_grad_norm(cuda_context& ctx, float* g, std::size_t n, double max_norm,
                             double* norm = nullptr) {
  cuda_context::frame f(ctx);
  double* partial = ctx.take<double>(detail::norm_blocks);
  double* own = ctx.take<double>(1);
  float* factor = ctx.take<float>(1);
  detail::sum_squares_kernel<<<detail::norm_blocks, 256, 0, ctx.stream()>>>(g, n, partial);
  if (auto s = cuda_status(cudaGetLastError(), "clip_grad_norm sum launch"); !s) return s;
  detail::norm_factor_kernel<<<1, 256, 0, ctx.stream()>>>(partial, max_norm, norm ? norm : own,
                                                          factor);
  if (auto s = cuda_status(cudaGetLastError(), "clip_grad_norm norm launch"); !s) return s;
  if (n == 0) return {};
  detail::scale_by_kernel<<<elementwise_blocks(n), 256, 0, ctx.stream()>>>(g, n, factor);
  return cuda_status(cudaGetLastError(), "clip_grad_norm scale launch");
}

// One AdamW step of the whole arena at step t ≥ 1 with learning rate lr_t: θ (plane::param)
// from ∇ (plane::grad), moments in moment1/moment2 (allocated, zero, on first use).
inline status adamw_step(const optim::adamw& opt, arena<cuda>& a, long t, float lr_t,
                         cudaStream_t stream) {
  const auto k =
      optim::formula::make_adamw_scalars(lr_t, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, t);
  auto theta = a.get(plane::param);
  return adamw_update(theta.data(), a.get(plane::moment1).data(), a.get(plane::moment2).data(),
                      a.get(plane::grad).data(), theta.size(), k, stream);
}

}  // namespace paco::kernels
