#pragma once
// Element-wise CUDA kernels, each one call of a PACO_HD formula (paco/compress/detail/formulas.hpp
// for casts and error feedback, paco/outer/formulas.hpp and paco/optim/formulas.hpp for the update
// steps) with a host twin in include/ (paco/compress/cast.hpp, paco/compress/error_feedback.hpp,
// paco/outer/nesterov_update.hpp, paco/optim/adamw_update.hpp):
//   cast_to_half / cast_from_half     fp32 ↔ bf16/fp16 (round to nearest even)
//   nesterov_update                   b ← μ·b + Δ; θ ← θ − η·(Δ + μ·b)
//   adamw_update                      PyTorch AdamW (decoupled decay, bias correction)
//   ef_accumulate / ef_subtract       r ← g + r;  r ← r − sent
// All: grid-stride loops of 256 threads, enqueued on a stream, no scratch and no allocation.
//
// Legend: n elements; θ parameters, b outer momentum, Δ pseudo-gradient, m/v moments, r residual.

#include <cuda_runtime.h>

#include <cstdint>

#include "paco/compress/cast.hpp"
#include "paco/compress/detail/formulas.hpp"
#include "paco/cuda_check.cuh"
#include "paco/optim/formulas.hpp"
#include "paco/outer/formulas.hpp"

namespace paco::kernels {

namespace detail {

#define PACO_GRID_STRIDE(i, n)                                                                   \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

// Casts in groups of 4 (a float4 and 4 codes in 8 bytes) from group `g0` on when `vec`, then
// the elements past the last whole group one by one.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void to_half_kernel(const float* __restrict__ x, std::size_t n, bool fp16, bool vec,
                               std::uint16_t* __restrict__ h) {
  namespace f = paco::compress::formula;
  auto one = [&](float v) { return fp16 ? f::to_fp16(v) : f::to_bf16(v); };
  const std::size_t groups = vec ? n / 4 : 0;
  PACO_GRID_STRIDE(g, groups) {
    const float4 v = reinterpret_cast<const float4*>(x)[g];
    reinterpret_cast<uint2*>(h)[g] = make_uint2(one(v.x) | static_cast<unsigned>(one(v.y)) << 16,
                                                one(v.z) | static_cast<unsigned>(one(v.w)) << 16);
  }
  PACO_GRID_STRIDE(j, n - 4 * groups) h[4 * groups + j] = one(x[4 * groups + j]);
}
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void from_half_kernel(const std::uint16_t* __restrict__ h, std::size_t n, bool fp16,
                                 bool vec, float* __restrict__ y) {
  namespace f = paco::compress::formula;
  auto one = [&](std::uint16_t c) { return fp16 ? f::from_fp16(c) : f::from_bf16(c); };
  const std::size_t groups = vec ? n / 4 : 0;
  PACO_GRID_STRIDE(g, groups) {
    const uint2 c = reinterpret_cast<const uint2*>(h)[g];
    reinterpret_cast<float4*>(y)[g] = make_float4(
        one(static_cast<std::uint16_t>(c.x)), one(static_cast<std::uint16_t>(c.x >> 16)),
        one(static_cast<std::uint16_t>(c.y)), one(static_cast<std::uint16_t>(c.y >> 16)));
  }
  PACO_GRID_STRIDE(j, n - 4 * groups) y[4 * groups + j] = one(h[4 * groups + j]);
}
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void nesterov_kernel(float* __restrict__ theta, float* __restrict__ b,
                                const float* __restrict__ delta, std::size_t n, float mu,
                                float eta) {
  PACO_GRID_STRIDE(i, n) {
    float t = theta[i], m = b[i];
    paco::outer::formula::nesterov_step(t, m, delta[i], mu, eta);
    theta[i] = t;
    b[i] = m;
  }
}
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void adamw_kernel(float* __restrict__ theta, float* __restrict__ m,
                             float* __restrict__ v, const float* __restrict__ g, std::size_t n,
                             paco::optim::formula::adamw_scalars k) {
  PACO_GRID_STRIDE(i, n) {
    float t = theta[i], mm = m[i], vv = v[i];
    paco::optim::formula::adamw_step(t, mm, vv, g[i], k);
    theta[i] = t;
    m[i] = mm;
    v[i] = vv;
  }
}
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void ef_accumulate_kernel(const float* __restrict__ g, float* __restrict__ r,
                                     std::size_t n) {
  PACO_GRID_STRIDE(i, n) r[i] = paco::compress::formula::ef_accumulate(g[i], r[i]);
}
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void ef_subtract_kernel(float* __restrict__ r, const float* __restrict__ sent,
                                   std::size_t n) {
  PACO_GRID_STRIDE(i, n) r[i] = paco::compress::formula::ef_residual(r[i], sent[i]);
}

#undef PACO_GRID_STRIDE

inline bool aligned(const void* p, std::size_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}

}  // namespace detail

// fp32 → 16-bit codes (the compress::cast payload). Cost: reads 4n, writes 2n bytes.
inline status cast_to_half(const float* x, std::size_t n, compress::half_format fmt,
                           std::uint16_t* h, cudaStream_t stream) {
  if (n == 0) return {};
  const bool vec = detail::aligned(x, 16) && detail::aligned(h, 8);
  detail::to_half_kernel<<<elementwise_blocks(vec ? n / 4 + 3 : n), 256, 0, stream>>>(
      x, n, fmt == compress::half_format::fp16, vec, h);
  return cuda_status(cudaGetLastError(), "cast_to_half launch");
}
// 16-bit codes → fp32 (exact). Cost: reads 2n, writes 4n bytes.
inline status cast_from_half(const std::uint16_t* h, std::size_t n, compress::half_format fmt,
                             float* y, cudaStream_t stream) {
  if (n == 0) return {};
  const bool vec = detail::aligned(h, 8) && detail::aligned(y, 16);
  detail::from_half_kernel<<<elementwise_blocks(vec ? n / 4 + 3 : n), 256, 0, stream>>>(
      h, n, fmt == compress::half_format::fp16, vec, y);
  return cuda_status(cudaGetLastError(), "cast_from_half launch");
}
// Fused outer Nesterov step (host twin outer::nesterov_update). Cost: 20n bytes.
inline status nesterov_update(float* theta, float* b, const float* delta, std::size_t n, float mu,
                              float eta, cudaStream_t stream) {
  if (n == 0) return {};
  detail::nesterov_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(theta, b, delta, n, mu, eta);
  return cuda_status(cudaGetLastError(), "nesterov_update launch");
}
// Fused AdamW step (host twin optim::adamw_update; k from make_adamw_scalars). Cost: 28n bytes.
inline status adamw_update(float* theta, float* m, float* v, const float* g, std::size_t n,
                           const optim::formula::adamw_scalars& k, cudaStream_t stream) {
  if (n == 0) return {};
  detail::adamw_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(theta, m, v, g, n, k);
  return cuda_status(cudaGetLastError(), "adamw_update launch");
}
// r ← g + r (host twin compress::ef_accumulate). Cost: 12n bytes.
inline status ef_accumulate(const float* g, float* r, std::size_t n, cudaStream_t stream) {
  if (n == 0) return {};
  detail::ef_accumulate_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(g, r, n);
  return cuda_status(cudaGetLastError(), "ef_accumulate launch");
}
// r ← r − sent (host twin compress::ef_subtract). Cost: 12n bytes.
inline status ef_subtract(float* r, const float* sent, std::size_t n, cudaStream_t stream) {
  if (n == 0) return {};
  detail::ef_subtract_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(r, sent, n);
  return cuda_status(cudaGetLastError(), "ef_subtract launch");
}

}  // namespace paco::kernels
