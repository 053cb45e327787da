#pragma once
// column_sums: out_k[c] += Σ_n f(n, c)_k over N rows, for K quantities at once (a bias gradient,
// layer_norm's dγ and dβ), deterministic and parallel over rows: the rows are cut into chunks
// fixed by N alone; a block of 32 columns × 8 row lanes sums a chunk (each lane its rows in
// order, then the 8 lanes in order) into a partial; a second pass adds the chunks' partials in
// order. The same N, C and inputs give the same bits on any GPU. The sums differ from the host
// twins' (which add the rows one after another) in order only.
//   scratch: column_sums_floats(N, C, K) floats (the partials)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "paco/cuda_check.cuh"

namespace paco::kernels::nn {

// K floats a functor returns per (row, column).
template <int K>
struct column_values {
  float v[K];
};

// Chunks the rows are cut into (at most 128, about 256 rows each).
inline int column_chunks(int N) {
  return std::min(128, std::max(1, (N + 255) / 256));
}
inline std::size_t column_sums_floats(int N, int C, int K) {
  return std::size_t(column_chunks(N)) * K * C;
}

namespace detail {

template <int K, class F>
__global__ void column_partials_kernel(F f, int N, int C, int chunk_rows,
                                       float* __restrict__ partial) {
  __shared__ float sh[K][8][33];
  const int c = blockIdx.x * 32 + threadIdx.x, r = threadIdx.y, chunk = blockIdx.y;
  const int n0 = chunk * chunk_rows, n1 = min(N, n0 + chunk_rows);
  float s[K] = {};
  if (c < C)
    for (int n = n0 + r; n < n1; n += 8) {
      const column_values<K> v = f(n, c);
      for (int k = 0; k < K; ++k) s[k] += v.v[k];
    }
  for (int k = 0; k < K; ++k) sh[k][r][threadIdx.x] = s[k];
  __syncthreads();
  if (r == 0 && c < C)
    for (int k = 0; k < K; ++k) {
      float t = 0;
      for (int j = 0; j < 8; ++j) t += sh[k][j][threadIdx.x];
      partial[(std::size_t(chunk) * K + k) * C + c] = t;
    }
}

template <int K>
struct column_outputs {
  float* p[K];
};

template <int K>
__global__ void column_totals_kernel(const float* __restrict__ partial, int chunks, int C,
                                     column_outputs<K> out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int k = 0; k < K; ++k) {
    float t = 0;
    for (int j = 0; j < chunks; ++j) t += partial[(std::size_t(j) * K + k) * C + c];
    out.p[k][c] += t;
  }
}

}  // namespace detail

// out[k][c] += Σ_n f(n, c).v[k]. f: a device-callable functor (n, c) → column_values<K>.
// partial: device scratch of column_sums_floats(N, C, K) floats.
template <int K, class F>
status column_sums(F f, int N, int C, float* const (&out)[K], float* partial, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return {};
  const int chunks = column_chunks(N), chunk_rows = (N + chunks - 1) / chunks;
  detail::column_partials_kernel<K>
      <<<dim3((C + 31) / 32, chunks), dim3(32, 8), 0, stream>>>(f, N, C, chunk_rows, partial);
  if (auto s = cuda_status(cudaGetLastError(), "column_sums partials launch"); !s) return s;
  detail::column_outputs<K> o;
  for (int k = 0; k < K; ++k) o.p[k] = out[k];
  detail::column_totals_kernel<K><<<(C + 255) / 256, 256, 0, stream>>>(partial, chunks, C, o);
  return cuda_status(cudaGetLastError(), "column_sums totals launch");
}

}  // namespace paco::kernels::nn
