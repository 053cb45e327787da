#pragma once
// CUDA top-k with the host codec's wire format (paco/compress/topk.hpp): keys = |x| bits,
// a stable descending cub::DeviceRadixSort of (key, index) pairs (ties: lowest index first,
// as on the host), the first k indices sorted ascending with a second radix sort, then a gather.
//
// Legend: n elements, k kept; payload: indices u32[k] increasing | values f32[k].

#include <cuda_runtime.h>

#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "paco/compress/detail/formulas.hpp"
#include "paco/compress/topk.hpp"
#include "paco/cuda_check.cuh"
#include "paco/scratch.cuh"

namespace paco::kernels {

namespace detail {

template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void topk_keys_kernel(const float* __restrict__ x, std::size_t n,
                                 std::uint32_t* __restrict__ keys,
                                 std::uint32_t* __restrict__ idx) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    keys[i] = paco::compress::formula::magnitude_key(x[i]);
    idx[i] = static_cast<std::uint32_t>(i);
  }
}
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void topk_gather_kernel(const float* __restrict__ x,
                                   const std::uint32_t* __restrict__ idx, std::size_t k,
                                   std::uint32_t* __restrict__ out_idx,
                                   float* __restrict__ out_val) {
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t i = idx[j];
    out_idx[j] = i;
    out_val[j] = x[i];
  }
}

// y[idx_j] = val_j for in-range indices; counts the others into *bad.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void topk_scatter_kernel(const std::uint32_t* __restrict__ idx,
                                    const float* __restrict__ val, std::size_t k, std::size_t n,
                                    float* __restrict__ y, unsigned* bad) {
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t i = idx[j];
    if (i < n)
      y[i] = val[j];
    else if (bad)
      atomicAdd(bad, 1u);
  }
}

inline int bits_for(std::size_t n) {
  int b = 1;
  while (b < 32 && (std::size_t{1} << b) < n) ++b;
  return b;
}

}  // namespace detail

// Scratch bytes topk_select needs for n elements and k kept (queried from CUB, no allocation).
inline std::size_t topk_workspace_bytes(std::size_t n, std::size_t k) {
  std::size_t sort_pairs = 0, sort_keys = 0;
  cub::DeviceRadixSort::SortPairsDescending(
      nullptr, sort_pairs, static_cast<std::uint32_t*>(nullptr),
      static_cast<std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
      static_cast<std::uint32_t*>(nullptr), static_cast<int>(n), 0, 31);
  cub::DeviceRadixSort::SortKeys(nullptr, sort_keys, static_cast<std::uint32_t*>(nullptr),
                                 static_cast<std::uint32_t*>(nullptr), static_cast<int>(k), 0,
                                 detail::bits_for(n));
  const std::size_t u = n * sizeof(std::uint32_t);
  return scratch_arena::footprint(
      {u, u, u, u, k * sizeof(std::uint32_t), sort_pairs > sort_keys ? sort_pairs : sort_keys});
}

// Top-k of x (device, n floats) at `density` into `out` (device, 8k bytes), the same bytes as
// compress::topk::encode on the host.
// Requires: n < 2^31; out_bytes == compress::topk{}.wire_bytes(n, density); scratch holds
// topk_workspace_bytes(n, k). Ensures: enqueued on `stream`; no allocation.
// Cost: two radix sorts (n pairs, k keys) + 2 passes.
template <ScratchAllocator S>
status topk_select(const float* x, std::size_t n, double density, std::byte* out,
                   std::size_t out_bytes, S& scratch, cudaStream_t stream) {
  if (!(density > 0.0 && density <= 1.0))
    return {errc::invalid_argument, "topk_select: density must be in (0, 1]"};
  if (n >= (std::size_t{1} << 31))
    return {errc::invalid_argument, "topk_select: n must be < 2^31 (CUB int sizes)"};
  const std::size_t k = compress::topk_count(n, density);
  if (out_bytes != 8 * k)
    return {errc::invalid_argument, "topk_select: output is not wire_bytes(n, density)"};
  if (n == 0) return {};
  const std::size_t u = n * sizeof(std::uint32_t);
  auto* keys_in = static_cast<std::uint32_t*>(scratch.take(u));
  auto* keys_out = static_cast<std::uint32_t*>(scratch.take(u));
  auto* idx_in = static_cast<std::uint32_t*>(scratch.take(u));
  auto* idx_out = static_cast<std::uint32_t*>(scratch.take(u));
  auto* chosen = static_cast<std::uint32_t*>(scratch.take(k * sizeof(std::uint32_t)));
  std::size_t sort_pairs = 0, sort_keys = 0;
  cub::DeviceRadixSort::SortPairsDescending(nullptr, sort_pairs, keys_in, keys_out, idx_in, idx_out,
                                            static_cast<int>(n), 0, 31, stream);
  cub::DeviceRadixSort::SortKeys(nullptr, sort_keys, idx_out, chosen, static_cast<int>(k), 0,
                                 detail::bits_for(n), stream);
  const std::size_t temp_bytes = sort_pairs > sort_keys ? sort_pairs : sort_keys;
  void* temp = scratch.take(temp_bytes);
  if (!keys_in || !keys_out || !idx_in || !idx_out || !chosen || !temp)
    return {errc::too_large, "topk_select: scratch smaller than topk_workspace_bytes(n, k)"};
  detail::topk_keys_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, n, keys_in, idx_in);
  if (auto s = cuda_status(cudaGetLastError(), "topk keys launch"); !s) return s;
  std::size_t tb = temp_bytes;
  if (auto s = cuda_status(
          cub::DeviceRadixSort::SortPairsDescending(temp, tb, keys_in, keys_out, idx_in, idx_out,
                                                    static_cast<int>(n), 0, 31, stream),
          "topk sort pairs");
      !s)
    return s;
  tb = temp_bytes;
  if (auto s =
          cuda_status(cub::DeviceRadixSort::SortKeys(temp, tb, idx_out, chosen, static_cast<int>(k),
                                                     0, detail::bits_for(n), stream),
                      "topk sort indices");
      !s)
    return s;
  auto* out_idx = reinterpret_cast<std::uint32_t*>(out);
  auto* out_val = reinterpret_cast<float*>(out + 4 * k);
  detail::topk_gather_kernel<<<elementwise_blocks(k), 256, 0, stream>>>(x, chosen, k, out_idx,
                                                                        out_val);
  return cuda_status(cudaGetLastError(), "topk gather launch");
}

// Decodes a top-k payload on the device: y = 0, then y[idx_j] = val_j. Sizes are checked on the
// host; out-of-range indices are skipped and counted into a device counter taken from `scratch`
// (its pointer goes to *bad_out when non-null). Order of indices is not checked on the device.
// Requires: in of in_bytes bytes on the device. Ensures: enqueued on `stream`; no allocation.
template <ScratchAllocator S>
status topk_decode(const std::byte* in, std::size_t in_bytes, std::size_t n, double density,
                   float* y, S& scratch, cudaStream_t stream, unsigned** bad_out = nullptr) {
  if (!(density > 0.0 && density <= 1.0))
    return {errc::invalid_argument, "topk_decode: density must be in (0, 1]"};
  const std::size_t k = compress::topk_count(n, density);
  if (in_bytes != 8 * k)
    return {errc::corrupt, "topk_decode: payload is not wire_bytes(n, density)"};
  auto* bad = static_cast<unsigned*>(scratch.take(sizeof(unsigned)));
  if (!bad) return {errc::too_large, "topk_decode: scratch exhausted"};
  if (auto s = cuda_status(cudaMemsetAsync(bad, 0, sizeof(unsigned), stream), "memset"); !s)
    return s;
  if (bad_out) *bad_out = bad;
  if (n == 0) return {};
  if (auto s = cuda_status(cudaMemsetAsync(y, 0, n * sizeof(float), stream), "memset"); !s)
    return s;
  if (k == 0) return {};
  detail::topk_scatter_kernel<<<elementwise_blocks(k), 256, 0, stream>>>(
      reinterpret_cast<const std::uint32_t*>(in), reinterpret_cast<const float*>(in + 4 * k), k, n,
      y, bad);
  return cuda_status(cudaGetLastError(), "topk_decode launch");
}

}  // namespace paco::kernels
