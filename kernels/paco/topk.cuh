#pragma once
// CUDA top-k with the host codec's wire format (paco/compress/topk.hpp): keys = |x| bits; a
// radix select finds the cut (the k-th largest key, and at the cut the last index taken: ties go
// to the lowest indices, as on the host) without sorting, then a tiled compaction writes the
// kept indices in increasing order with their values.
//
// Legend: n elements, k kept; payload: indices u32[k] increasing | values f32[k].

#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "paco/compress/detail/formulas.hpp"
#include "paco/compress/topk.hpp"
#include "paco/cuda_check.cuh"
#include "paco/scratch.cuh"

namespace paco::kernels {

namespace detail {

// ---- radix select of the cut: the k-th largest (|x| bits, then lowest index) ----
// The 31 key bits are resolved in three digits: bits 30..19 (4096 bins) in a pass over x,
// bits 18..7 in a second pass over x that also gathers the elements of the chosen top digit
// as candidates, bits 6..0 over the candidates. When more elements share the cut key than are
// needed, the lowest indices among them win: three more digits over the candidates' indices
// (bits 30..20, 19..9, 8..0) find the last index taken. Each histogram kernel's last thread
// block to finish picks the digit (a "last block done" counter), so no host round trip.

constexpr int topk_threads = 256;
constexpr int topk_cand_cap = 3072;  // candidates a block stages in shared memory
constexpr std::size_t topk_tile = 4096;  // elements per tile of the final compaction

struct topk_state {
  std::uint32_t hist1[4096], hist2[4096], hist3[128];
  std::uint32_t tie_hist[3][2048];
  std::uint32_t done[7];    // finished thread blocks per kernel with a last-block step
  std::uint32_t ncand;      // candidates gathered by pass 2
  std::uint32_t want;       // elements still to take under the digits fixed so far
  std::uint32_t digit1, digit2;
  std::uint32_t cut_key;    // the k-th largest key
  std::uint32_t ties;       // 1 when only some of the elements with key == cut_key are taken
  std::uint32_t tie_want;   // how many of them are still to take (lowest indices first)
  std::uint32_t tie_prefix; // index bits fixed so far
  std::uint32_t last_index; // largest index taken among key == cut_key (all: 0xffffffff)
};

// In the last block of a histogram kernel: the bin where the running count over `bins` bins
// (from the top when `descending`, else from the bottom) reaches `want` (1 <= want <= total);
// writes it to *bin and what is still wanted inside it to *rest. All threads must call it.
template <int Bins>
__device__ void find_bin(const std::uint32_t* hist, std::uint32_t want, bool descending,
                         std::uint32_t* bin, std::uint32_t* rest) {
  constexpr int per = Bins >= topk_threads ? Bins / topk_threads : 1;
  using scan = cub::BlockScan<std::uint32_t, topk_threads>;
  __shared__ typename scan::TempStorage tmp;
  std::uint32_t c[per], sum = 0;
#pragma unroll
  for (int j = 0; j < per; ++j) {
    const int p = threadIdx.x * per + j;  // position in counting order
    c[j] = p < Bins ? __ldcg(hist + (descending ? Bins - 1 - p : p)) : 0u;
    sum += c[j];
  }
  std::uint32_t before = 0;
  scan(tmp).ExclusiveSum(sum, before);
#pragma unroll
  for (int j = 0; j < per; ++j) {
    const int p = threadIdx.x * per + j;
    if (before < want && before + c[j] >= want) {
      *bin = static_cast<std::uint32_t>(descending ? Bins - 1 - p : p);
      *rest = want - before;
    }
    before += c[j];
  }
}

// Adds a block's shared histogram into the global one; returns true in the block that
// finished last (its threads then see every block's counts).
template <int Bins>
__device__ bool flush_and_check_last(const std::uint32_t* sh, std::uint32_t* global,
                                     std::uint32_t* done) {
  __syncthreads();
  for (int b = threadIdx.x; b < Bins; b += blockDim.x)
    if (sh[b]) atomicAdd(global + b, sh[b]);
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_hist1_kernel(const float* __restrict__ x, std::size_t n, bool vec, std::uint32_t k,
                      topk_state* st) {
  namespace f = paco::compress::formula;
  __shared__ std::uint32_t h[4096];
  for (int b = threadIdx.x; b < 4096; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t t0 = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t n4 = vec ? n / 4 : 0;
  const auto* x4 = reinterpret_cast<const float4*>(x);
  constexpr int u = 4;  // float4 loads in flight per thread before their atomics
  std::size_t i = t0;
  for (; i + (u - 1) * stride < n4; i += u * stride) {
    float4 v[u];
#pragma unroll
    for (int j = 0; j < u; ++j) v[j] = x4[i + j * stride];
#pragma unroll
    for (int j = 0; j < u; ++j) {
      atomicAdd(&h[f::magnitude_key(v[j].x) >> 19], 1u);
      atomicAdd(&h[f::magnitude_key(v[j].y) >> 19], 1u);
      atomicAdd(&h[f::magnitude_key(v[j].z) >> 19], 1u);
      atomicAdd(&h[f::magnitude_key(v[j].w) >> 19], 1u);
    }
  }
  for (; i < n4; i += stride) {
    const float4 v = x4[i];
    atomicAdd(&h[f::magnitude_key(v.x) >> 19], 1u);
    atomicAdd(&h[f::magnitude_key(v.y) >> 19], 1u);
    atomicAdd(&h[f::magnitude_key(v.z) >> 19], 1u);
    atomicAdd(&h[f::magnitude_key(v.w) >> 19], 1u);
  }
  for (std::size_t i = 4 * n4 + t0; i < n; i += stride)
    atomicAdd(&h[f::magnitude_key(x[i]) >> 19], 1u);
  if (!flush_and_check_last<4096>(h, st->hist1, &st->done[0])) return;
  find_bin<4096>(st->hist1, k, true, &st->digit1, &st->want);
}

// Pass 2: histogram of bits 18..7 among elements whose top digit is digit1, which are also
// gathered as candidates (key, index), staged per block in shared memory; counts per tile the
// elements above digit1.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_pass2_kernel(const float* __restrict__ x, std::size_t n, bool vec, topk_state* st,
                      uint2* __restrict__ cand, std::uint32_t* __restrict__ tile_count) {
  namespace f = paco::compress::formula;
  __shared__ std::uint32_t h[4096];
  __shared__ uint2 buf[topk_cand_cap];
  __shared__ std::uint32_t count, base;
  for (int b = threadIdx.x; b < 4096; b += blockDim.x) h[b] = 0;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  const std::uint32_t d1 = __ldcg(&st->digit1);
  // 1 when the element is above the cut's top digit (kept for sure), 0 otherwise; gathers it
  // as a candidate when it is in that digit
  auto take = [&](float v, std::size_t i) -> std::uint32_t {
    const std::uint32_t key = f::magnitude_key(v);
    if (key >> 19 != d1) return key >> 19 > d1;
    atomicAdd(&h[key >> 7 & 4095u], 1u);
    const std::uint32_t p = atomicAdd(&count, 1u);
    const uint2 c = make_uint2(key, static_cast<std::uint32_t>(i));
    if (p < topk_cand_cap)
      buf[p] = c;
    else  // only when nearly everything falls into one digit: straight to global memory
      cand[atomicAdd(&st->ncand, 1u)] = c;
    return 0u;
  };
  auto drain = [&] {  // moves the staged candidates out; all threads
    __syncthreads();
    const std::uint32_t m = count < topk_cand_cap ? count : topk_cand_cap;
    if (threadIdx.x == 0) base = m ? atomicAdd(&st->ncand, m) : 0u;
    __syncthreads();
    for (std::uint32_t j = threadIdx.x; j < m; j += blockDim.x) cand[base + j] = buf[j];
    __syncthreads();
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
  };
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t n4 = vec ? n / 4 : 0;
  const auto* x4 = reinterpret_cast<const float4*>(x);
  // block-uniform trip counts, so the block can drain between rounds; a round is two float4
  // per thread (loads first), at most 8 candidates per thread
  constexpr int u = 2;
  for (std::size_t r = blockIdx.x * static_cast<std::size_t>(blockDim.x) * u; r < n4;
       r += u * stride) {
    float4 v[u];
#pragma unroll
    for (int j = 0; j < u; ++j) {
      const std::size_t i = r + j * blockDim.x + threadIdx.x;
      if (i < n4) v[j] = x4[i];
    }
#pragma unroll
    for (int j = 0; j < u; ++j) {
      const std::size_t i = r + j * blockDim.x + threadIdx.x;
      std::uint32_t above = 0;
      if (i < n4)
        above = take(v[j].x, 4 * i) + take(v[j].y, 4 * i + 1) + take(v[j].z, 4 * i + 2) +
                take(v[j].w, 4 * i + 3);
      // a warp's 128 elements lie in one tile (tiles are 4096 elements, 128-aligned)
      above = __reduce_add_sync(0xffffffffu, above);
      if (threadIdx.x % 32 == 0 && above) atomicAdd(&tile_count[(i - threadIdx.x % 32) / 1024], above);
    }
    __syncthreads();
    const bool drain_now = count > topk_cand_cap - 4 * u * topk_threads;
    __syncthreads();  // every thread has read count before any adds to it again
    if (drain_now) drain();
  }
  for (std::size_t i = 4 * n4 + blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
       i < n; i += stride)
    if (take(x[i], i)) atomicAdd(&tile_count[i / topk_tile], 1u);
  drain();
  if (!flush_and_check_last<4096>(h, st->hist2, &st->done[1])) return;
  find_bin<4096>(st->hist2, st->want, true, &st->digit2, &st->want);
}

// Pass 3, over the candidates: bits 6..0 among those with digit2, which fixes the cut key.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_pass3_kernel(const uint2* __restrict__ cand, topk_state* st) {
  __shared__ std::uint32_t h[128];
  __shared__ std::uint32_t bin, rest;
  for (int b = threadIdx.x; b < 128; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const std::uint32_t m = __ldcg(&st->ncand), d2 = __ldcg(&st->digit2);
  for (std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < m; j += gridDim.x * blockDim.x) {
    const std::uint32_t key = cand[j].x;
    if ((key >> 7 & 4095u) == d2) atomicAdd(&h[key & 127u], 1u);
  }
  if (!flush_and_check_last<128>(h, st->hist3, &st->done[2])) return;
  find_bin<128>(st->hist3, __ldcg(&st->want), true, &bin, &rest);
  __syncthreads();
  if (threadIdx.x == 0) {
    st->cut_key = __ldcg(&st->digit1) << 19 | __ldcg(&st->digit2) << 7 | bin;
    const bool ties = rest < __ldcg(&st->hist3[bin]);
    st->ties = ties;
    st->tie_want = rest;
    st->tie_prefix = 0;
    st->last_index = ties ? 0u : 0xffffffffu;
  }
}

// Tie round r (0, 1, 2) over the candidates with key == cut_key: index bits 30..20, 19..9 and
// 8..0 under the prefix fixed by the earlier rounds. Returns at once when there is no tie.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_tie_kernel(const uint2* __restrict__ cand, topk_state* st, int round) {
  if (!__ldcg(&st->ties)) return;
  constexpr int shift[3] = {20, 9, 0};
  constexpr std::uint32_t width[3] = {2048, 2048, 512};
  __shared__ std::uint32_t h[2048];
  __shared__ std::uint32_t bin, rest;
  for (int b = threadIdx.x; b < 2048; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const std::uint32_t m = __ldcg(&st->ncand), cut = __ldcg(&st->cut_key);
  const std::uint32_t prefix = __ldcg(&st->tie_prefix);
  const int sh = shift[round];
  const int above = round == 0 ? 31 : shift[round - 1];  // bits above this digit: the prefix
  for (std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < m; j += gridDim.x * blockDim.x) {
    const uint2 c = cand[j];
    if (c.x != cut) continue;
    if (round > 0 && c.y >> above != prefix) continue;
    atomicAdd(&h[c.y >> sh & (width[round] - 1)], 1u);
  }
  if (!flush_and_check_last<2048>(h, st->tie_hist[round], &st->done[3 + round])) return;
  find_bin<2048>(st->tie_hist[round], __ldcg(&st->tie_want), false, &bin, &rest);
  __syncthreads();
  if (threadIdx.x == 0) {
    const std::uint32_t p = prefix << (above - sh) | bin;
    st->tie_prefix = p;
    st->tie_want = rest;
    if (round == 2) st->last_index = p;
  }
}

// Adds, per tile, the candidates that are kept (the elements above the cut's top digit were
// counted by pass 2); the last block turns the counts into each tile's first output slot.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_count_kernel(const uint2* __restrict__ cand, topk_state* st,
                      std::uint32_t* __restrict__ tile_count, std::size_t tiles) {
  const std::uint32_t m = __ldcg(&st->ncand), cut = __ldcg(&st->cut_key);
  const std::uint32_t last_index = __ldcg(&st->last_index);
  for (std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < m; j += gridDim.x * blockDim.x) {
    const uint2 c = cand[j];
    if (c.x > cut || (c.x == cut && c.y <= last_index))
      atomicAdd(&tile_count[c.y / topk_tile], 1u);
  }
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(&st->done[6], 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  using scan = cub::BlockScan<std::uint32_t, topk_threads>;
  __shared__ typename scan::TempStorage tmp;
  constexpr int per = 16;  // tiles per thread per sweep: one sweep up to 2^26 elements
  std::uint32_t running = 0;
  for (std::size_t t0 = 0; t0 < tiles; t0 += per * topk_threads) {  // in place: counts → slots
    const std::size_t first = t0 + static_cast<std::size_t>(threadIdx.x) * per;
    std::uint32_t c[per], sum = 0;
#pragma unroll
    for (int j = 0; j < per; ++j) {
      c[j] = first + j < tiles ? __ldcg(&tile_count[first + j]) : 0u;
      sum += c[j];
    }
    std::uint32_t before = 0, total = 0;
    scan(tmp).ExclusiveSum(sum, before, total);
    before += running;
#pragma unroll
    for (int j = 0; j < per; ++j) {
      if (first + j < tiles) tile_count[first + j] = before;
      before += c[j];
    }
    running += total;
    __syncthreads();
  }
}

// The final compaction: one thread block per tile of 4096 elements writes the kept indices
// (key above the cut, or at the cut and not past the last index taken) and their values from
// the tile's first slot, in increasing index order.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_write_kernel(const float* __restrict__ x, std::size_t n, bool vec,
                      const topk_state* __restrict__ st, const std::uint32_t* __restrict__ slot,
                      std::uint32_t* __restrict__ out_idx, float* __restrict__ out_val) {
  namespace f = paco::compress::formula;
  using scan = cub::BlockScan<std::uint32_t, topk_threads>;
  __shared__ typename scan::TempStorage tmp;
  const std::uint32_t cut = st->cut_key, last_index = st->last_index;
  constexpr int rounds = static_cast<int>(topk_tile / (4 * topk_threads));
  // all loads first (a round covers 1024 consecutive elements, 4 per thread), then one scan per
  // round in element order
  float v[rounds][4];
#pragma unroll
  for (int r = 0; r < rounds; ++r) {
    const std::size_t i0 =
        blockIdx.x * topk_tile + static_cast<std::size_t>(r) * 4 * topk_threads + 4 * threadIdx.x;
    if (vec && i0 + 4 <= n) {
      const float4 q = *reinterpret_cast<const float4*>(x + i0);
      v[r][0] = q.x, v[r][1] = q.y, v[r][2] = q.z, v[r][3] = q.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) v[r][e] = i0 + e < n ? x[i0 + e] : 0.0f;
    }
  }
  std::uint32_t base = slot[blockIdx.x];
#pragma unroll
  for (int r = 0; r < rounds; ++r) {
    const std::size_t i0 =
        blockIdx.x * topk_tile + static_cast<std::size_t>(r) * 4 * topk_threads + 4 * threadIdx.x;
    bool keep[4];
    std::uint32_t c = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::uint32_t key = f::magnitude_key(v[r][e]);
      keep[e] = i0 + e < n &&
                (key > cut || (key == cut && static_cast<std::uint32_t>(i0 + e) <= last_index));
      c += keep[e];
    }
    std::uint32_t pos = 0, total = 0;
    scan(tmp).ExclusiveSum(c, pos, total);
    pos += base;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (keep[e]) {
        out_idx[pos] = static_cast<std::uint32_t>(i0 + e);
        out_val[pos] = v[r][e];
        ++pos;
      }
    base += total;
    __syncthreads();  // tmp is reused
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

inline unsigned topk_grid(std::size_t work) {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const std::size_t want = (work + topk_threads - 1) / topk_threads;
  const std::size_t cap = static_cast<std::size_t>(sms > 0 ? sms : 1) * 4;
  return static_cast<unsigned>(want == 0 ? 1 : (want < cap ? want : cap));
}

}  // namespace detail

// Scratch bytes topk_select needs for n elements and k kept: the selection state, a counter per
// tile of 4096 elements, and room for n candidates (a few per mille are used for smooth data).
inline std::size_t topk_workspace_bytes(std::size_t n, std::size_t /*k*/) {
  const std::size_t tiles = (n + detail::topk_tile - 1) / detail::topk_tile;
  return scratch_arena::footprint({sizeof(detail::topk_state) + tiles * sizeof(std::uint32_t),
                                   n * sizeof(uint2)});
}

// Top-k of x (device, n floats) at `density` into `out` (device, 8k bytes), the same bytes as
// compress::topk::encode on the host (ties at the cut: lowest indices).
// Requires: x finite; n < 2^31; out_bytes == compress::topk{}.wire_bytes(n, density); scratch
// holds topk_workspace_bytes(n, k). Ensures: enqueued on `stream`; no allocation, no host sync.
// Cost: three passes over x (two histograms, the compaction) and small passes over the
// candidates (the top digit's elements: 0.3% of n for Gaussian x at k = 1%).
template <ScratchAllocator S>
status topk_select(const float* x, std::size_t n, double density, std::byte* out,
                   std::size_t out_bytes, S& scratch, cudaStream_t stream) {
  if (!(density > 0.0 && density <= 1.0))
    return {errc::invalid_argument, "topk_select: density must be in (0, 1]"};
  if (n >= (std::size_t{1} << 31))
    return {errc::invalid_argument, "topk_select: n must be < 2^31 (32-bit indices)"};
  const std::size_t k = compress::topk_count(n, density);
  if (out_bytes != 8 * k)
    return {errc::invalid_argument, "topk_select: output is not wire_bytes(n, density)"};
  if (n == 0) return {};
  const std::size_t tiles = (n + detail::topk_tile - 1) / detail::topk_tile;
  const std::size_t state_bytes = sizeof(detail::topk_state) + tiles * sizeof(std::uint32_t);
  auto* st = static_cast<detail::topk_state*>(scratch.take(state_bytes));
  auto* cand = static_cast<uint2*>(scratch.take(n * sizeof(uint2)));
  if (!st || !cand)
    return {errc::too_large, "topk_select: scratch smaller than topk_workspace_bytes(n, k)"};
  auto* tile_count = reinterpret_cast<std::uint32_t*>(st + 1);
  if (auto s = cuda_status(cudaMemsetAsync(st, 0, state_bytes, stream), "memset"); !s) return s;
  const bool vec = reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  const unsigned grid = detail::topk_grid(vec ? n / 4 : n);
  const auto kk = static_cast<std::uint32_t>(k);
  constexpr int threads = detail::topk_threads;
  detail::topk_hist1_kernel<<<grid, threads, 0, stream>>>(x, n, vec, kk, st);
  detail::topk_pass2_kernel<<<grid, threads, 0, stream>>>(x, n, vec, st, cand, tile_count);
  // candidates: 0.3% of n for Gaussian x at k = 1%, up to n; a fixed grid strides over them
  const unsigned small = detail::topk_grid(n / 512);
  detail::topk_pass3_kernel<<<small, threads, 0, stream>>>(cand, st);
  for (int r = 0; r < 3; ++r) detail::topk_tie_kernel<<<small, threads, 0, stream>>>(cand, st, r);
  detail::topk_count_kernel<<<small, threads, 0, stream>>>(cand, st, tile_count, tiles);
  auto* out_idx = reinterpret_cast<std::uint32_t*>(out);
  auto* out_val = reinterpret_cast<float*>(out + 4 * k);
  detail::topk_write_kernel<<<static_cast<unsigned>(tiles), threads, 0, stream>>>(
      x, n, vec, st, tile_count, out_idx, out_val);
  return cuda_status(cudaGetLastError(), "topk_select launch");
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
