#pragma once
// cross-entropy fused with softmax on the device (host twin nn::cross_entropy): the mean
// next-token loss over N rows of logits (N, V), and dlogits = (softmax − onehot)·scale/N.
//   one block of 256 threads per row: max, Σ exp, the row's loss into row_loss[n], dlogits
//   (written, not accumulated; may alias logits); then one block sums row_loss in order into
//   *loss (a double on the device: the caller downloads 8 bytes, or keeps it there)
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "paco/cuda_check.cuh"

namespace paco::kernels::nn {

namespace detail {

// The block's reduction of v (256 threads) with op, through shared memory; every thread gets it.
template <class Op>
__device__ float block_reduce(float v, Op op, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

template <int = 0>
__global__ void xent_rows_kernel(const float* logits, const std::int32_t* __restrict__ targets,
                                 float* dlogits, float* __restrict__ row_loss, int V, float inv_n) {
  __shared__ float sh[256];
  const std::size_t row = blockIdx.x;
  const float* z = logits + row * V;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += 256) m = fmaxf(m, z[v]);
  m = block_reduce(
      m, [](float a, float b) { return fmaxf(a, b); }, sh);
  float s = 0;
  for (int v = threadIdx.x; v < V; v += 256) s += expf(z[v] - m);
  s = block_reduce(
      s, [](float a, float b) { return a + b; }, sh);
  const int y = targets[row];
  const float zy = z[y];  // read before dlogits (which may alias logits) is written
  __syncthreads();
  if (dlogits) {
    float* g = dlogits + row * V;
    const float k = inv_n / s;
    for (int v = threadIdx.x; v < V; v += 256) g[v] = expf(z[v] - m) * k - (v == y ? inv_n : 0.0f);
  }
  if (threadIdx.x == 0) row_loss[row] = m + logf(s) - zy;
}

template <int = 0>
__global__ void xent_mean_kernel(const float* __restrict__ row_loss, int N,
                                 double* __restrict__ loss) {
  __shared__ double sh[256];
  double s = 0;
  for (int n = threadIdx.x; n < N; n += 256) s += row_loss[n];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (int(threadIdx.x) < k) sh[threadIdx.x] += sh[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = sh[0] / N;
}

}  // namespace detail

// Bytes of scratch cross_entropy needs for N rows (the per-row losses).
inline constexpr std::size_t cross_entropy_scratch_bytes(int N) {
  return std::size_t(N) * sizeof(float);
}

// *loss (device) = (1/N) Σ_n −log softmax(logits_n)[target_n]; dlogits as above when non-null.
// row_loss: device scratch of N floats. Requires: 0 ≤ target < V. Cost: reads 4NV (twice),
// writes 4NV bytes.
inline status cross_entropy(const float* logits, const std::int32_t* targets, float* dlogits, int N,
                            int V, float scale, float* row_loss, double* loss,
                            cudaStream_t stream) {
  if (N <= 0) return {errc::invalid_argument, "cross_entropy: no rows"};
  detail::xent_rows_kernel<<<N, 256, 0, stream>>>(logits, targets, dlogits, row_loss, V,
                                                  scale / float(N));
  if (auto s = cuda_status(cudaGetLastError(), "cross_entropy rows launch"); !s) return s;
  detail::xent_mean_kernel<<<1, 256, 0, stream>>>(row_loss, N, loss);
  return cuda_status(cudaGetLastError(), "cross_entropy mean launch");
}

}  // namespace paco::kernels::nn
