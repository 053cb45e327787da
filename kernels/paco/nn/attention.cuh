#pragma once
// causal_attention on the device (host twin nn::causal_attention), same θ and cache layout:
// θ = [Wqkv (3C,C) | bqkv (3C) | Wproj (C,C) | bproj (C)], cache = [qkv (B,T,3C) |
// P (B,NH,T,T) | a (B,T,C)]. Per sequence b, the NH heads are one strided-batched GEMM each
// (head h's q, k, v sit hs columns apart in a row of qkv); the causal softmax and its backward
// are one warp per row of P. Unlike the host's tiles, the products span the whole T×T square
// (the masked half is multiplied by zeros), so sums differ from the host's in order only.
//   scratch: causal_attention_scratch_bytes (da, dqkv and one sequence's dS for all heads)
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "paco/cuda_check.cuh"
#include "paco/nn/gemm.cuh"
#include "paco/nn/linear.cuh"

namespace paco::kernels::nn {

namespace detail {

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_add(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// rows = B·NH·T rows of length T; row r is query t = r mod T: P[j] = softmax(S[0..t])[j] for
// j ≤ t, 0 above. In place (S holds the scaled scores). 8 warps (rows) per block.
template <int = 0>
__global__ void causal_softmax_kernel(float* __restrict__ P, std::size_t rows, int T) {
  const std::size_t r = blockIdx.x * std::size_t(8) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int t = int(r % T);
  float* row = P + r * T;
  float m = -INFINITY;
  for (int j = lane; j <= t; j += 32) m = fmaxf(m, row[j]);
  m = warp_max(m);
  float s = 0;
  for (int j = lane; j <= t; j += 32) s += expf(row[j] - m);
  const float inv = 1.0f / warp_add(s);
  for (int j = lane; j < T; j += 32) row[j] = j <= t ? expf(row[j] - m) * inv : 0.0f;
}

// dS = P ⊙ (dP − Σ_j P·dP) · scale for j ≤ t, 0 above; dP in place of dS.
template <int = 0>
__global__ void causal_softmax_backward_kernel(const float* __restrict__ P, float* __restrict__ dS,
                                               std::size_t rows, int T, float scale) {
  const std::size_t r = blockIdx.x * std::size_t(8) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int t = int(r % T);
  const float* p = P + r * T;
  float* g = dS + r * T;
  float dot = 0;
  for (int j = lane; j <= t; j += 32) dot += p[j] * g[j];
  dot = warp_add(dot);
  for (int j = lane; j < T; j += 32) g[j] = j <= t ? p[j] * (g[j] - dot) * scale : 0.0f;
}

inline unsigned warp_row_blocks(std::size_t rows) {
  return unsigned((rows + 7) / 8);
}

}  // namespace detail

// Device scratch the backward takes for batch (B, T), width C, NH heads.
inline std::size_t causal_attention_scratch_bytes(int B, int T, int C, int NH) {
  const std::size_t N = std::size_t(B) * T;
  return scratch_arena::footprint(
      {N * C * sizeof(float), N * 3 * C * sizeof(float), std::size_t(NH) * T * T * sizeof(float)});
}

// x (B,T,C) → y (B,T,C); fills the cache. Requires: C % NH == 0.
// Cost: 8·N·C² + 4·B·T²·C flops.
inline status causal_attention_forward(cuda_context& ctx, const float* theta, const float* x,
                                       float* y, float* cache, int B, int T, int C, int NH) {
  using paco::nn::trans;
  const int hs = C / NH, C3 = 3 * C;
  const std::size_t N = std::size_t(B) * T, TT = std::size_t(T) * T;
  float* qkv = cache;
  float* P = cache + N * C3;
  float* a = P + std::size_t(B) * NH * TT;
  if (auto s = linear_forward(ctx, theta, x, qkv, int(N), C, C3, true); !s) return s;
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + std::size_t(b) * T * C3;
    float* Pb = P + std::size_t(b) * NH * TT;
    if (auto s = gemm_batched(ctx, trans::no, trans::yes, T, T, hs, scale, q, C3, hs, q + C, C3, hs,
                              0.0f, Pb, T, TT, NH);
        !s)
      return s;
  }
  const std::size_t rows = std::size_t(B) * NH * T;
  detail::causal_softmax_kernel<<<detail::warp_row_blocks(rows), 256, 0, ctx.stream()>>>(P, rows,
                                                                                         T);
  if (auto s = cuda_status(cudaGetLastError(), "causal_softmax launch"); !s) return s;
  for (int b = 0; b < B; ++b) {
    const float* v = qkv + std::size_t(b) * T * C3 + 2 * C;
    if (auto s =
            gemm_batched(ctx, trans::no, trans::no, T, hs, T, 1.0f, P + std::size_t(b) * NH * TT, T,
                         TT, v, C3, hs, 0.0f, a + std::size_t(b) * T * C, C, hs, NH);
        !s)
      return s;
  }
  const std::size_t pq = std::size_t(C3) * C + C3;
  return linear_forward(ctx, theta + pq, a, y, int(N), C, C, true);
}

// dx += …, dθ += … as on the host (dx may be null). Takes da, dqkv and dS from ctx's scratch.
inline status causal_attention_backward(cuda_context& ctx, const float* theta, const float* x,
                                        const float* dy, float* dx, float* dtheta,
                                        const float* cache, int B, int T, int C, int NH) {
  using paco::nn::trans;
  cuda_context::frame f(ctx);
  const int hs = C / NH, C3 = 3 * C;
  const std::size_t N = std::size_t(B) * T, TT = std::size_t(T) * T;
  const float* qkv = cache;
  const float* P = cache + N * C3;
  const float* a = P + std::size_t(B) * NH * TT;
  float* da = ctx.take<float>(N * C);
  float* dqkv = ctx.take<float>(N * C3);
  float* dS = ctx.take<float>(std::size_t(NH) * TT);
  if (auto s = cuda_status(cudaMemsetAsync(da, 0, N * C * sizeof(float), ctx.stream()), "memset");
      !s)
    return s;
  if (auto s =
          cuda_status(cudaMemsetAsync(dqkv, 0, N * C3 * sizeof(float), ctx.stream()), "memset");
      !s)
    return s;
  const std::size_t pq = std::size_t(C3) * C + C3;
  if (auto s = linear_backward(ctx, theta + pq, a, dy, da, dtheta + pq, int(N), C, C, true); !s)
    return s;
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + std::size_t(b) * T * C3;
    const float *k = q + C, *v = q + 2 * C;
    float* dq = dqkv + std::size_t(b) * T * C3;
    float *dk = dq + C, *dv = dq + 2 * C;
    const float* Pb = P + std::size_t(b) * NH * TT;
    const float* dab = da + std::size_t(b) * T * C;
    // dP = da vᵀ;  dv += Pᵀ da
    if (auto s = gemm_batched(ctx, trans::no, trans::yes, T, T, hs, 1.0f, dab, C, hs, v, C3, hs,
                              0.0f, dS, T, TT, NH);
        !s)
      return s;
    if (auto s = gemm_batched(ctx, trans::yes, trans::no, T, hs, T, 1.0f, Pb, T, TT, dab, C, hs,
                              1.0f, dv, C3, hs, NH);
        !s)
      return s;
    const std::size_t rows = std::size_t(NH) * T;
    detail::causal_softmax_backward_kernel<<<detail::warp_row_blocks(rows), 256, 0, ctx.stream()>>>(
        Pb, dS, rows, T, scale);
    if (auto s = cuda_status(cudaGetLastError(), "causal_softmax_backward launch"); !s) return s;
    // dq += dS k;  dk += dSᵀ q
    if (auto s = gemm_batched(ctx, trans::no, trans::no, T, hs, T, 1.0f, dS, T, TT, k, C3, hs, 1.0f,
                              dq, C3, hs, NH);
        !s)
      return s;
    if (auto s = gemm_batched(ctx, trans::yes, trans::no, T, hs, T, 1.0f, dS, T, TT, q, C3, hs,
                              1.0f, dk, C3, hs, NH);
        !s)
      return s;
  }
  return linear_backward(ctx, theta, x, dqkv, dx, dtheta, int(N), C, C3, true);
}

}  // namespace paco::kernels::nn
