#pragma once
// embedding on the device (host twin nn::embedding): token plus learned position embedding.
// θ = [wte (V, C) | wpe (ctx, C)]; x = token ids (B, T); y (B·T, C).
//   embedding_forward    y[b,t] = wte[x[b,t]] + wpe[t], one thread per element
//   embedding_backward   dwpe[t] += Σ_b dy[b,t] (one thread per (t, c)); dwte[v] += Σ_{x=v} dy:
//                        the (token, row) pairs radix-sorted by token (CUB, stable), then one
//                        block per run of a token and 256 columns adds its rows onto dwte[v] in
//                        ascending order, as the host does (bit-identical; no atomics)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

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
__global__ void iota_kernel(std::int32_t* __restrict__ v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = i;
}

// Block (i, tile): if sorted position i starts a run of token v, adds rows[i..end of run] of dy
// onto dwte[v] for the tile's 256 columns, one row after another.
template <int = 0>
__global__ void embedding_dwte_runs_kernel(const std::int32_t* __restrict__ keys,
                                           const std::int32_t* __restrict__ rows,
                                           const float* __restrict__ dy, float* __restrict__ dwte,
                                           int N, int C) {
  const int i = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C || (i > 0 && keys[i] == keys[i - 1])) return;
  const int v = keys[i];
  float t = dwte[std::size_t(v) * C + c];
  for (int j = i; j < N && keys[j] == v; ++j) t += dy[std::size_t(rows[j]) * C + c];
  dwte[std::size_t(v) * C + c] = t;
}

// Bits of a token id below V.
inline int id_bits(int V) {
  int b = 1;
  while (b < 31 && (1 << b) < V) ++b;
  return b;
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
// Bytes of scratch embedding_backward takes for N = B·T rows and vocabulary V.
inline std::size_t embedding_backward_scratch_bytes(int N, int V) {
  std::size_t sort = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, sort, static_cast<const std::int32_t*>(nullptr),
                                  static_cast<std::int32_t*>(nullptr),
                                  static_cast<const std::int32_t*>(nullptr),
                                  static_cast<std::int32_t*>(nullptr), N, 0, detail::id_bits(V));
  return 3 * ((std::size_t(N) * 4 + 255) / 256 * 256) + sort;
}

// dθ (V·C + ctx·C) += the gradients of wte and wpe (no dx: the input is ids). Requires: scratch
// of embedding_backward_scratch_bytes(B·T, V) bytes, 256-byte aligned.
inline status embedding_backward(const std::int32_t* x, const float* dy, float* dtheta, int B,
                                 int T, int V, int C, void* scratch, std::size_t scratch_bytes,
                                 cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return {};
  const int N = B * T;
  if (scratch_bytes < embedding_backward_scratch_bytes(N, V))
    return {errc::invalid_argument,
            "embedding_backward: scratch smaller than "
            "embedding_backward_scratch_bytes"};
  const std::size_t tc = std::size_t(T) * C;
  detail::embedding_dwpe_kernel<<<unsigned((tc + 255) / 256), 256, 0, stream>>>(
      dy, dtheta + std::size_t(V) * C, B, T, C);
  if (auto s = cuda_status(cudaGetLastError(), "embedding_backward dwpe launch"); !s) return s;
  const std::size_t ints = (std::size_t(N) * 4 + 255) / 256 * 256;
  auto* base = static_cast<std::byte*>(scratch);
  auto* rows_in = reinterpret_cast<std::int32_t*>(base);
  auto* rows = reinterpret_cast<std::int32_t*>(base + ints);
  auto* keys = reinterpret_cast<std::int32_t*>(base + 2 * ints);
  std::size_t sort_bytes = scratch_bytes - 3 * ints;
  detail::iota_kernel<<<(N + 255) / 256, 256, 0, stream>>>(rows_in, N);
  if (auto s = cuda_status(cudaGetLastError(), "embedding_backward iota launch"); !s) return s;
  if (auto s =
          cuda_status(cub::DeviceRadixSort::SortPairs(base + 3 * ints, sort_bytes, x, keys, rows_in,
                                                      rows, N, 0, detail::id_bits(V), stream),
                      "embedding_backward sort");
      !s)
    return s;
  detail::embedding_dwte_runs_kernel<<<dim3(N, (C + 255) / 256), 256, 0, stream>>>(keys, rows, dy,
                                                                                   dtheta, N, C);
  return cuda_status(cudaGetLastError(), "embedding_backward dwte launch");
}

}  // namespace paco::kernels::nn
