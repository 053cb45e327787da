#pragma once
// CUDA top-k with the host codec's wire format (paco/compress/topk.hpp): keys = |x| bits; the
// kept elements are the k largest keys, ties at the cut going to the lowest indices (as on the
// host), written with increasing indices. No sort, one full pass over x:
//   1. sample: a histogram of the top 12 key bits of the first 64 elements of every tile picks
//      a floor `lo` that about k·(1 + margin) elements reach (a lower edge of a 12-bit bin);
//   2. collect (the one full pass): each tile of 4096 elements appends its elements with
//      key >= lo, in index order, to one dense array of "entries" (the tile's offset from a
//      counter); if fewer than k were collected (a sample that misled), a second launch
//      collects every element;
//   3. select, over the entries only: three digits of the key (12 + 12 + 7 bits) find the cut
//      and how many entries with the cut key are taken (the lowest indices);
//   4. emit: a scan over tiles of the entries above the cut and of those at it gives each
//      tile's slot in the payload and its first rank among the cut-key entries; a warp per tile
//      then writes its kept entries.
// Each histogram kernel's last thread block to finish picks the digit (a "last block done"
// counter), so nothing waits for the host.
//
// Legend: n elements, k kept; payload: indices u32[k] increasing | values f32[k].

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "paco/compress/detail/formulas.hpp"
#include "paco/compress/topk.hpp"
#include "paco/cuda_check.cuh"
#include "paco/scratch.cuh"

namespace paco::kernels {

namespace detail {

constexpr int topk_threads = 256;
constexpr int topk_warps = topk_threads / 32;
constexpr std::size_t topk_tile = 4096;      // elements per tile
constexpr std::size_t topk_sample_run = 64;  // the sample: the first 64 elements of each tile

__host__ __device__ inline std::size_t topk_tiles(std::size_t n) {
  return (n + topk_tile - 1) / topk_tile;
}

struct topk_state {
  std::uint32_t sample_hist[4096];
  std::uint32_t hist[3][4096];  // key digits 30..19, 18..7, 6..0 among the entries
  std::uint32_t done[8];        // finished thread blocks per kernel with a last-block step
  std::uint32_t lo;             // entries are the elements with key >= lo (0 if unsampled)
  std::uint32_t entries;        // entries collected by the first collection
  std::uint32_t entries_all;    // entries collected by the fallback (every element)
  std::uint32_t want;     // entries still to take under the key digits fixed so far; after the
                          // last digit: how many with key == cut_key (lowest indices first)
  std::uint32_t prefix;   // key bits fixed so far
  std::uint32_t cut_key;  // the k-th largest key
};
// The scratch holds, after the state: count[tiles] (entries per tile), offset[tiles] (where a
// tile's entries start), slot[tiles] (each tile's first output slot), equal[tiles] (entries with
// the cut key in the tiles before), then entries[n] (uint2: value bits, index). Tiles append their
// entries in index order at an offset taken from a counter, so the entries are one dense array (in
// no particular tile order).

// Entries the select kernels go over: the first collection's, or the fallback's when the first
// collected fewer than k.
__device__ inline std::uint32_t entry_count(const topk_state* st, std::uint32_t k) {
  const std::uint32_t first = __ldcg(&st->entries);
  return first >= k ? first : __ldcg(&st->entries_all);
}

// In the last block of a histogram kernel: the bin where the running count over `Bins` bins,
// from the top, reaches `want` (1 <= want <= total); writes it to *bin and what is still wanted
// inside it to *rest. All threads must call it.
template <int Bins>
__device__ void find_bin(const std::uint32_t* hist, std::uint32_t want, std::uint32_t* bin,
                         std::uint32_t* rest) {
  constexpr int per = Bins >= topk_threads ? Bins / topk_threads : 1;
  using scan = cub::BlockScan<std::uint32_t, topk_threads>;
  __shared__ typename scan::TempStorage tmp;
  std::uint32_t c[per], sum = 0;
#pragma unroll
  for (int j = 0; j < per; ++j) {
    const int p = threadIdx.x * per + j;  // position in counting order
    c[j] = p < Bins ? __ldcg(hist + (Bins - 1 - p)) : 0u;
    sum += c[j];
  }
  std::uint32_t before = 0;
  scan(tmp).ExclusiveSum(sum, before);
#pragma unroll
  for (int j = 0; j < per; ++j) {
    const int p = threadIdx.x * per + j;
    if (before < want && before + c[j] >= want) {
      *bin = static_cast<std::uint32_t>(Bins - 1 - p);
      *rest = want - before;
    }
    before += c[j];
  }
}

// h[bin] += 1 for each calling lane, one shared atomic per distinct bin of the warp (the hot
// bins of smooth data would otherwise serialise the lanes that share them).
__device__ inline void warp_count(std::uint32_t* h, std::uint32_t bin) {
  const unsigned peers = __match_any_sync(__activemask(), bin);
  if ((threadIdx.x % 32) == static_cast<unsigned>(__ffs(peers) - 1))
    atomicAdd(&h[bin], static_cast<std::uint32_t>(__popc(peers)));
}

// After a block's global writes: true in the block that finished last (counted in *done), whose
// threads then see every block's writes. All threads must call it.
__device__ inline bool last_block(std::uint32_t* done) {
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// Adds a block's shared histogram into the global one; last_block(done).
template <int Bins>
__device__ bool flush_and_check_last(const std::uint32_t* sh, std::uint32_t* global,
                                     std::uint32_t* done) {
  __syncthreads();
  for (int b = threadIdx.x; b < Bins; b += blockDim.x)
    if (sh[b]) atomicAdd(global + b, sh[b]);
  return last_block(done);
}

// 1. The floor lo: the lower edge of the 12-bit bin where the sample's running count from the
// top reaches `rank` (the host's k·s/n plus a margin, 1 <= rank <= samples).
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_sample_kernel(const float* __restrict__ x, std::size_t n, bool vec, std::uint32_t rank,
                       topk_state* st) {
  namespace f = paco::compress::formula;
  __shared__ std::uint32_t h[4096];
  __shared__ std::uint32_t bin, rest;
  for (int b = threadIdx.x; b < 4096; b += blockDim.x) h[b] = 0;
  __syncthreads();
  // thread g looks at 4 elements: quad g % 16 of the first 64 elements of tile g / 16
  const std::size_t tiles = topk_tiles(n);
  for (std::size_t g = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
       g < tiles * (topk_sample_run / 4); g += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t i0 = g / (topk_sample_run / 4) * topk_tile + 4 * (g % (topk_sample_run / 4));
    if (vec && i0 + 4 <= n) {
      const float4 v = *reinterpret_cast<const float4*>(x + i0);
      warp_count(h, f::magnitude_key(v.x) >> 19);
      warp_count(h, f::magnitude_key(v.y) >> 19);
      warp_count(h, f::magnitude_key(v.z) >> 19);
      warp_count(h, f::magnitude_key(v.w) >> 19);
    } else {
      for (std::size_t i = i0; i < i0 + 4 && i < n; ++i)
        warp_count(h, f::magnitude_key(x[i]) >> 19);
    }
  }
  if (!flush_and_check_last<4096>(h, st->sample_hist, &st->done[0])) return;
  find_bin<4096>(st->sample_hist, rank, &bin, &rest);
  __syncthreads();
  if (threadIdx.x == 0) st->lo = bin << 19;
}

// Elements the sample kernel looks at (the host sizes `rank` with it).
inline std::size_t topk_samples(std::size_t n) {
  const std::size_t full = n / topk_tile, rest = n % topk_tile;
  return full * topk_sample_run + (rest < topk_sample_run ? rest : topk_sample_run);
}

// The elements of one tile with key >= lo, in index order, appended to the entries.
__device__ inline void collect_tile(const float* __restrict__ x, std::size_t n, bool vec,
                                    std::uint32_t lo, std::size_t tile, bool fallback,
                                    topk_state* st, std::uint32_t* __restrict__ count,
                                    std::uint32_t* __restrict__ offset,
                                    uint2* __restrict__ entries) {
  namespace f = paco::compress::formula;
  using scan = cub::BlockScan<std::uint32_t, topk_threads>;
  __shared__ typename scan::TempStorage tmp;
  constexpr int rounds = static_cast<int>(topk_tile / (4 * topk_threads));
  const std::size_t tile0 = tile * topk_tile;
  // all loads first (a round covers 1024 consecutive elements, 4 per thread), then one scan
  // per round in element order
  float v[rounds][4];
#pragma unroll
  for (int r = 0; r < rounds; ++r) {
    const std::size_t i0 = tile0 + static_cast<std::size_t>(r) * 4 * topk_threads + 4 * threadIdx.x;
    if (vec && i0 + 4 <= n) {
      const float4 q = *reinterpret_cast<const float4*>(x + i0);
      v[r][0] = q.x, v[r][1] = q.y, v[r][2] = q.z, v[r][3] = q.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) v[r][e] = i0 + e < n ? x[i0 + e] : 0.0f;
    }
  }
  bool keep[rounds][4];
  std::uint32_t pos[rounds], round_base[rounds], base = 0;
#pragma unroll
  for (int r = 0; r < rounds; ++r) {
    const std::size_t i0 = tile0 + static_cast<std::size_t>(r) * 4 * topk_threads + 4 * threadIdx.x;
    std::uint32_t c = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      keep[r][e] = i0 + e < n && f::magnitude_key(v[r][e]) >= lo;
      c += keep[r][e];
    }
    std::uint32_t total = 0;
    scan(tmp).ExclusiveSum(c, pos[r], total);
    round_base[r] = base;
    base += total;
    __syncthreads();  // tmp is reused
  }
  __shared__ std::uint32_t at;
  if (threadIdx.x == 0) {
    at = base ? atomicAdd(fallback ? &st->entries_all : &st->entries, base) : 0u;
    count[tile] = base;
    offset[tile] = at;
  }
  __syncthreads();
  uint2* out = entries + at;
#pragma unroll
  for (int r = 0; r < rounds; ++r) {
    const std::size_t i0 = tile0 + static_cast<std::size_t>(r) * 4 * topk_threads + 4 * threadIdx.x;
    std::uint32_t p = round_base[r] + pos[r];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (keep[r][e])
        out[p++] = make_uint2(__float_as_uint(v[r][e]), static_cast<std::uint32_t>(i0 + e));
  }
  __syncthreads();  // `at` is reused by the block's next tile
}

// 2. Thread blocks over tiles: each tile's elements with key >= lo, in index order, to the
// tile's entries. `fallback`: runs only when the first launch collected fewer than k, and then
// collects every element.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_collect_kernel(const float* __restrict__ x, std::size_t n, bool vec, std::uint32_t k,
                        bool fallback, topk_state* st, std::uint32_t* __restrict__ count,
                        std::uint32_t* __restrict__ offset, uint2* __restrict__ entries) {
  if (fallback && __ldcg(&st->entries) >= k) return;
  const std::uint32_t lo = fallback ? 0u : st->lo;
  const std::size_t tiles = topk_tiles(n);
  for (std::size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x)
    collect_tile(x, n, vec, lo, tile, fallback, st, count, offset, entries);
}

// Calls f(entry) for every entry (a grid-stride loop over the dense entries).
template <class F>
__device__ void for_each_entry(const uint2* entries, std::uint32_t m, F&& f) {
  for (std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < m; j += gridDim.x * blockDim.x)
    f(entries[j]);
}

// 3a. Key digit `round` (0: bits 30..19, 1: 18..7, 2: 6..0) among the entries under the prefix
// fixed so far; the last block fixes the digit, and after round 2 the cut.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_digit_kernel(const uint2* __restrict__ entries, std::uint32_t k, topk_state* st,
                      int round) {
  __shared__ std::uint32_t h[4096];
  __shared__ std::uint32_t bin, rest;
  for (int b = threadIdx.x; b < 4096; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const std::uint32_t prefix = __ldcg(&st->prefix);
  const int shift = round == 0 ? 19 : round == 1 ? 7 : 0;
  const int above = round == 0 ? 31 : round == 1 ? 19 : 7;  // prefix = key >> above
  const std::uint32_t mask = round == 2 ? 127u : 4095u;
  for_each_entry(entries, entry_count(st, k), [&](uint2 e) {
    const std::uint32_t key = e.x & 0x7fffffffu;
    if (round > 0 && key >> above != prefix) return;
    warp_count(h, key >> shift & mask);
  });
  if (!flush_and_check_last<4096>(h, st->hist[round], &st->done[1 + round])) return;
  find_bin<4096>(st->hist[round], round == 0 ? k : __ldcg(&st->want), &bin, &rest);
  __syncthreads();
  if (threadIdx.x == 0) {
    const std::uint32_t p = prefix << (above - shift) | bin;
    st->prefix = p;
    st->want = rest;
    if (round == 2) st->cut_key = p;
  }
}

// 4a. Per tile, the entries above the cut and those at it; the last block scans both over the
// tiles into each tile's first output slot (all entries above the cut before it, plus those at
// the cut, up to the number taken) and the cut-key entries before it.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_slot_kernel(const uint2* __restrict__ entries, const std::uint32_t* __restrict__ count,
                     const std::uint32_t* __restrict__ offset, std::size_t tiles, topk_state* st,
                     std::uint32_t* __restrict__ slot, std::uint32_t* __restrict__ equal) {
  const std::uint32_t cut = __ldcg(&st->cut_key);
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * topk_warps;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(topk_warps) + threadIdx.x / 32;
       t < tiles; t += warps) {  // a warp per tile
    const std::uint32_t m = count[t];
    const uint2* e = entries + offset[t];
    std::uint32_t above = 0, at = 0;
    for (std::uint32_t j = threadIdx.x % 32; j < m; j += 32) {
      const std::uint32_t key = e[j].x & 0x7fffffffu;
      above += key > cut;
      at += key == cut;
    }
    above = __reduce_add_sync(0xffffffffu, above);
    at = __reduce_add_sync(0xffffffffu, at);
    if (threadIdx.x % 32 == 0) {
      slot[t] = above;
      equal[t] = at;
    }
  }
  if (!last_block(&st->done[7])) return;
  const std::uint32_t take_equal = __ldcg(&st->want);
  using scan = cub::BlockScan<uint2, topk_threads>;
  __shared__ typename scan::TempStorage tmp;
  const auto plus = [](uint2 a, uint2 b) { return make_uint2(a.x + b.x, a.y + b.y); };
  constexpr int per = 16;  // tiles per thread per sweep: one sweep up to 2^26 elements
  uint2 running = make_uint2(0u, 0u);
  for (std::size_t t0 = 0; t0 < tiles; t0 += per * topk_threads) {  // in place: counts → slots
    const std::size_t first = t0 + static_cast<std::size_t>(threadIdx.x) * per;
    uint2 c[per], sum = make_uint2(0u, 0u);
#pragma unroll
    for (int j = 0; j < per; ++j) {
      c[j] = first + j < tiles ? make_uint2(__ldcg(&slot[first + j]), __ldcg(&equal[first + j]))
                               : make_uint2(0u, 0u);
      sum = plus(sum, c[j]);
    }
    uint2 before, total;
    scan(tmp).ExclusiveScan(sum, before, make_uint2(0u, 0u), plus, total);
    before = plus(before, running);
#pragma unroll
    for (int j = 0; j < per; ++j) {
      if (first + j < tiles) {
        slot[first + j] = before.x + (before.y < take_equal ? before.y : take_equal);
        equal[first + j] = before.y;
      }
      before = plus(before, c[j]);
    }
    running = plus(running, total);
    __syncthreads();
  }
}

// 4b. One warp per tile writes its kept entries, in order, from the tile's slot: those above
// the cut, and those at it while their rank among all cut-key entries is below the number taken.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_emit_kernel(const uint2* __restrict__ entries, const std::uint32_t* __restrict__ count,
                     const std::uint32_t* __restrict__ offset, std::size_t tiles,
                     const topk_state* __restrict__ st, const std::uint32_t* __restrict__ slot,
                     const std::uint32_t* __restrict__ equal, std::uint32_t* __restrict__ out_idx,
                     float* __restrict__ out_val) {
  const std::uint32_t cut = st->cut_key, take_equal = st->want;
  const unsigned lane = threadIdx.x % 32, below = (1u << lane) - 1u;
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * topk_warps;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(topk_warps) + threadIdx.x / 32;
       t < tiles; t += warps) {
    const std::uint32_t m = count[t];
    const uint2* e = entries + offset[t];
    std::uint32_t at = slot[t], rank = equal[t];
    for (std::uint32_t j0 = 0; j0 < m; j0 += 32) {  // warp-uniform trip count
      const std::uint32_t j = j0 + lane;
      const uint2 v = j < m ? e[j] : make_uint2(0u, 0u);
      const std::uint32_t key = v.x & 0x7fffffffu;
      const bool is_equal = j < m && key == cut;
      const unsigned eq = __ballot_sync(0xffffffffu, is_equal);
      const bool keep =
          j < m && (key > cut || (is_equal && rank + __popc(eq & below) < take_equal));
      const unsigned kept = __ballot_sync(0xffffffffu, keep);
      if (keep) {
        const std::uint32_t p = at + __popc(kept & below);
        out_idx[p] = v.y;
        out_val[p] = __uint_as_float(v.x);
      }
      at += __popc(kept);
      rank += __popc(eq);
    }
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

// Thread blocks for `work` threads' worth of work, at most `per_sm` on each of `sms`
// multiprocessors.
inline unsigned topk_grid(std::size_t work, int per_sm, int sms) {
  const std::size_t want = (work + topk_threads - 1) / topk_threads;
  const std::size_t cap = static_cast<std::size_t>(sms > 0 ? sms : 1) * per_sm;
  return static_cast<unsigned>(want == 0 ? 1 : (want < cap ? want : cap));
}

}  // namespace detail

// Scratch bytes topk_select needs for n elements and k kept: the selection state, four counters
// per tile of 4096 elements, and room for n entries (1.3·k to 2.3·k are used for Gaussian data).
inline std::size_t topk_workspace_bytes(std::size_t n, std::size_t /*k*/) {
  return scratch_arena::footprint(
      {sizeof(detail::topk_state) + 4 * detail::topk_tiles(n) * sizeof(std::uint32_t),
       n * sizeof(uint2)});
}

// Top-k of x (device, n floats) at `density` into `out` (device, 8k bytes), the same bytes as
// compress::topk::encode on the host (ties at the cut: lowest indices).
// Requires: x finite; n < 2^31; out_bytes == compress::topk{}.wire_bytes(n, density); scratch
// holds topk_workspace_bytes(n, k). Ensures: enqueued on `stream`; no allocation, no host sync.
// Cost: one pass over x (plus a 1/64 sample), small passes over the entries (≈ 1.5·k); when the
// sample misleads (fewer than k elements reach its floor), a second pass collects all of x.
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
  const std::size_t tiles = detail::topk_tiles(n);
  const std::size_t state_bytes = sizeof(detail::topk_state) + 4 * tiles * sizeof(std::uint32_t);
  auto* st = static_cast<detail::topk_state*>(scratch.take(state_bytes));
  auto* entries = static_cast<uint2*>(scratch.take(n * sizeof(uint2)));
  if (!st || !entries)
    return {errc::too_large, "topk_select: scratch smaller than topk_workspace_bytes(n, k)"};
  auto* count = reinterpret_cast<std::uint32_t*>(st + 1);
  auto* offset = count + tiles;
  auto* slot = offset + tiles;
  auto* equal = slot + tiles;
  if (auto s = cuda_status(cudaMemsetAsync(st, 0, state_bytes, stream), "memset"); !s) return s;
  const bool vec = reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  int dev = 0, sms = 0;
  if (auto s = cuda_status(cudaGetDevice(&dev), "cudaGetDevice"); !s) return s;
  if (auto s = cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                           "multiprocessor count");
      !s)
    return s;
  const auto kk = static_cast<std::uint32_t>(k);
  constexpr int threads = detail::topk_threads;
  // the sample's rank of the floor: its expected rank of the cut, plus 10% and 6 binomial
  // standard deviations (the sample is runs of 64 neighbours, less random than single draws;
  // more entries cost little, a floor too high costs a second pass); lo stays 0 (collect
  // everything) when that exceeds the sample
  const std::size_t samples = detail::topk_samples(n);
  const double expect =
      static_cast<double>(k) * static_cast<double>(samples) / static_cast<double>(n);
  const double rank = std::ceil(1.1 * expect + 6.0 * std::sqrt(expect) + 16.0);
  if (rank <= static_cast<double>(samples))
    detail::topk_sample_kernel<<<detail::topk_grid(samples / 4, 4, sms), threads, 0, stream>>>(
        x, n, vec, static_cast<std::uint32_t>(rank), st);
  const unsigned few = detail::topk_grid(tiles * threads, 1, sms);  // the fallback: a block per SM
  detail::topk_collect_kernel<<<static_cast<unsigned>(tiles), threads, 0, stream>>>(
      x, n, vec, kk, false, st, count, offset, entries);
  detail::topk_collect_kernel<<<few, threads, 0, stream>>>(x, n, vec, kk, true, st, count, offset,
                                                           entries);
  // the entries: about 1.5·k for Gaussian data, up to n; grids sized for k, striding over the rest
  const unsigned over_entries = detail::topk_grid(k, 4, sms);
  for (int r = 0; r < 3; ++r)
    detail::topk_digit_kernel<<<over_entries, threads, 0, stream>>>(entries, kk, st, r);
  const unsigned per_tile = detail::topk_grid(tiles * 32, 8, sms);  // a warp per tile
  detail::topk_slot_kernel<<<per_tile, threads, 0, stream>>>(entries, count, offset, tiles, st,
                                                             slot, equal);
  detail::topk_emit_kernel<<<per_tile, threads, 0, stream>>>(
      entries, count, offset, tiles, st, slot, equal, reinterpret_cast<std::uint32_t*>(out),
      reinterpret_cast<float*>(out + 4 * k));
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
