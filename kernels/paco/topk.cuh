#pragma once
// CUDA top-k with the host codec's wire format (paco/compress/topk.hpp): keys = |x| bits; the
// kept elements are the k largest keys, ties at the cut going to the lowest indices (as on the
// host), written with increasing indices. No sort, one full pass over x, a memset and four
// launches:
//   1. sample (a memset, then 32 thread blocks): a histogram of the top 12 key bits of 32768
//      elements spread over x picks a floor `lo` that about k·(1 + margin) elements reach; it
//      also zeroes the state;
//   2. collect (the one full pass): each tile of 4096 elements appends its elements with
//      key >= lo, in index order, to one dense array of "entries", and counts them by their top
//      14 key bits; the last thread block to finish reads off the cut's top 14 bits;
//   3. finish (a cooperative launch): over the entries that share those 14 bits, a histogram of
//      the next 6 (in shared memory, then summed) and one of all 17 remaining bits (in global
//      memory); the last block reads the rest of the cut off both, and how many entries with the
//      cut key are taken (the lowest indices). Where the sample misled (fewer than k entries, or
//      a cut outside the bins the collection counted), the same launch first collects every
//      element and/or finds the top 12 bits over the entries, with grid-wide syncs in between;
//   4. emit: blocks take groups of 32 tiles in order from a ticket; a warp per tile counts its
//      entries above the cut and at it; the group takes its place in the payload from the groups
//      before it (a decoupled look-back) and each warp writes its tile's kept entries.
//
// Legend: n elements, k kept; payload: indices u32[k] increasing | values f32[k].

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <cuda/atomic>

#include "paco/compress/detail/formulas.hpp"
#include "paco/compress/topk.hpp"
#include "paco/cuda_check.cuh"
#include "paco/scratch.cuh"

namespace paco::kernels {

namespace detail {

constexpr int topk_threads = 256;
constexpr int topk_sample_threads = 1024;
constexpr std::size_t topk_tile = 4096;          // elements per tile
constexpr std::size_t topk_sample_max = 32768;   // elements the sample reads (all when n is less)
constexpr std::size_t topk_sample_run = 16;      // in runs of 16 neighbours
constexpr std::uint32_t topk_hist0_bins = 1024;  // 14-bit bins (1/64 octave) the collection
                                                 // counts: 16 octaves
constexpr int topk_emit_threads = 1024;          // a warp per tile, 32 tiles per group

__host__ __device__ inline std::size_t topk_tiles(std::size_t n) {
  return (n + topk_tile - 1) / topk_tile;
}
// Groups of 32 tiles the emit hands out.
__host__ __device__ inline std::size_t topk_groups(std::size_t tiles) {
  return (tiles + topk_emit_threads / 32 - 1) / (topk_emit_threads / 32);
}

// Elements the sample reads, and where the i-th of them is (runs of 16 evenly spread over x).
__host__ __device__ inline std::size_t topk_sample_count(std::size_t n) {
  return n < topk_sample_max ? n : topk_sample_max;
}
__host__ __device__ inline std::size_t topk_sample_position(std::size_t n, std::size_t i) {
  if (n <= topk_sample_max) return i;
  constexpr std::size_t runs = topk_sample_max / topk_sample_run;
  return i / topk_sample_run * n / runs + i % topk_sample_run;
}

// A group's status in the emit's look-back: flag (2 bits) | entries above the cut in it, or in it
// and every group before it (31 bits) | entries at the cut, likewise (31 bits).
constexpr unsigned long long topk_flag_aggregate = 1ull << 62;  // this group's counts
constexpr unsigned long long topk_flag_prefix = 2ull << 62;     // counts up to this group

struct topk_state {
  // the sample (zeroed by a memset before it)
  std::uint32_t sample_done;                    // finished thread blocks
  alignas(16) std::uint32_t sample_hist[4096];  // top 12 key bits of the sampled elements
  // zeroed by the sample
  std::uint32_t lo;           // entries are the elements with key >= lo
  std::uint32_t hist_base;    // hist0[b]: entries in 14-bit bin hist_base + b; the last: above
  std::uint32_t entries;      // entries collected by the collection
  std::uint32_t entries_all;  // entries collected by finish's fallback (every element)
  std::uint32_t resolved;     // cut key bits known after the collection: 0 or 14
  std::uint32_t prefix;       // cut key bits fixed so far
  std::uint32_t want;         // entries still to take under the key bits fixed so far; after the
                              // last digit: how many with key == cut_key (lowest indices first)
  std::uint32_t cut_key;      // the k-th largest key
  std::uint32_t ticket;       // tile groups handed out by the emit
  std::uint32_t done[3];      // finished thread blocks: the collection, finish's two rounds
  alignas(16) std::uint32_t hist0[topk_hist0_bins];
  // finish: key bits 30..19 among the entries (only when the collection left them open), the
  // top 6 of the bits below the cut's known top ones, and all of those low bits (17, or 19 when
  // finish found the top 12 itself) among the entries under the known top bits. The collection
  // zeroes hist and low[0, 2^17); finish the rest of low when it needs it.
  alignas(16) std::uint32_t hist[2][4096];
  std::uint32_t low[1u << 19];
};
// The scratch holds the state, status[groups] (u64, the emit's look-back), count[tiles] (entries
// per tile) and offset[tiles] (where a tile's entries start), then entries[n] (uint2: value bits,
// index). Tiles append their entries in index order at an offset taken from a counter, so the
// entries are one dense array (in no particular tile order).

// Entries finish and emit go over: the collection's, or the fallback's when it collected fewer
// than k.
__device__ inline std::uint32_t entry_count(const topk_state* st, std::uint32_t k) {
  const std::uint32_t first = __ldcg(&st->entries);
  return first >= k ? first : __ldcg(&st->entries_all);
}

// The bin where the running count over `Bins` bins, from the top, reaches `want`
// (1 <= want <= total); writes it to *bin and what is still wanted inside it to *rest (neither
// is written when the bins hold fewer than `want`). `hist` in global memory (written by other
// thread blocks: read through L2) or in shared memory. All `Threads` threads must call it.
template <int Bins, int Threads, bool Global>
__device__ void find_bin(const std::uint32_t* hist, std::uint32_t want, std::uint32_t* bin,
                         std::uint32_t* rest) {
  constexpr int per = Bins >= Threads ? Bins / Threads : 1;
  using scan = cub::BlockScan<std::uint32_t, Threads>;
  __shared__ typename scan::TempStorage tmp;
  std::uint32_t c[per], sum = 0;
  if constexpr (Global && per % 4 == 0) {  // positions p .. p + per - 1 are bins
    // Bins - per·(t+1) .. Bins - 1 - per·t: 16-byte loads, all in flight (hist 16-byte aligned)
    const auto* q = reinterpret_cast<const uint4*>(hist + (Bins - per * (threadIdx.x + 1)));
#pragma unroll
    for (int j = 0; j < per / 4; ++j) {
      const uint4 w = __ldcg(q + j);
      c[per - 1 - 4 * j] = w.x, c[per - 2 - 4 * j] = w.y, c[per - 3 - 4 * j] = w.z,
                      c[per - 4 - 4 * j] = w.w;
    }
#pragma unroll
    for (int j = 0; j < per; ++j) sum += c[j];
  } else {
#pragma unroll
    for (int j = 0; j < per; ++j) {
      const int p = threadIdx.x * per + j;  // position in counting order
      const std::uint32_t* h = hist + (Bins - 1 - p);
      c[j] = p < Bins ? (Global ? __ldcg(h) : *h) : 0u;
      sum += c[j];
    }
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
  __syncthreads();  // tmp may be reused, and *bin is read by every thread
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

// 1. Thread blocks of 1024 over the sample (an element each): zero the state the collection
// counts into, and sum the sample's 12-bit histogram; the last block to finish picks the floor lo
// (the lower edge of the bin where the count from the top reaches the expected rank of the cut,
// e = k·s/n, plus 10%, 6 standard deviations and 16; 0 when that is more than the sample) and
// hist0's base (2 octaves below e's bin, not below the floor). Requires: sample_done and
// sample_hist zero.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_sample_threads)
    topk_sample_kernel(const float* __restrict__ x, std::size_t n, std::uint32_t k,
                       topk_state* st) {
  namespace f = paco::compress::formula;
  __shared__ std::uint32_t h[4096];
  __shared__ std::uint32_t bins[2], rests[2];
  const std::size_t s = topk_sample_count(n);
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(topk_sample_threads) + threadIdx.x;
  const float v = i < s ? __ldg(x + topk_sample_position(n, i)) : 0.0f;
  if (blockIdx.x == 0) {
    auto* w = reinterpret_cast<std::uint32_t*>(&st->lo);
    constexpr std::size_t words = (offsetof(topk_state, hist) - offsetof(topk_state, lo)) / 4;
    for (std::size_t j = threadIdx.x; j < words; j += blockDim.x) w[j] = 0;
  }
  for (int b = threadIdx.x; b < 4096; b += blockDim.x) h[b] = 0;
  __syncthreads();
  if (i < s) atomicAdd(&h[f::magnitude_key(v) >> 19], 1u);
  if (!flush_and_check_last<4096>(h, st->sample_hist, &st->sample_done)) return;
  const double e = static_cast<double>(k) * static_cast<double>(s) / static_cast<double>(n);
  const double floor_rank = ceil(1.1 * e + 6.0 * sqrt(e) + 16.0);
  const auto rank = [&](double r) {
    return static_cast<std::uint32_t>(fmin(fmax(r, 1.0), static_cast<double>(s)));
  };
  find_bin<4096, topk_sample_threads, true>(st->sample_hist, rank(floor_rank), &bins[0], &rests[0]);
  find_bin<4096, topk_sample_threads, true>(st->sample_hist, rank(e), &bins[1], &rests[1]);
  if (threadIdx.x != 0) return;
  const std::uint32_t lo_bin = floor_rank > static_cast<double>(s) ? 0u : bins[0];
  st->lo = lo_bin << 19;
  const std::uint32_t guess = bins[1] << 2, floor14 = lo_bin << 2;  // in 14-bit bins
  st->hist_base = guess >= floor14 + 128 ? guess - 128 : floor14;   // 2 octaves below the guess
}

// Where collect_tile counts entries: h0 (shared, hist0's bins from `base`).
struct topk_counting {
  std::uint32_t* h0;
  std::uint32_t base;
};
constexpr int topk_rounds = static_cast<int>(topk_tile / (4 * topk_threads));
static_assert(topk_rounds == 4, "one 16-bit field per round in the packed scan");

// Index of this thread's first element of round r in a tile (a round covers 1024 consecutive
// elements, 4 per thread).
__device__ inline std::size_t tile_element(std::size_t tile, int r) {
  return tile * topk_tile + static_cast<std::size_t>(r) * 4 * topk_threads + 4 * threadIdx.x;
}

// This thread's 16 elements of a tile (tile_element's 4 per round); zeros past n.
__device__ inline void load_tile(const float* __restrict__ x, std::size_t n, bool vec,
                                 std::size_t tile, float (&v)[topk_rounds][4]) {
#pragma unroll
  for (int r = 0; r < topk_rounds; ++r) {
    const std::size_t i0 = tile_element(tile, r);
    if (vec && i0 + 4 <= n) {
      const float4 q = __ldcs(reinterpret_cast<const float4*>(x + i0));  // read once: streaming
      v[r][0] = q.x, v[r][1] = q.y, v[r][2] = q.z, v[r][3] = q.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) v[r][e] = i0 + e < n ? x[i0 + e] : 0.0f;
    }
  }
}

// Of a tile loaded by load_tile: the elements with key >= lo, in index order, appended to the
// entries at an offset taken from *counter; with Count, also counted into h0 (shared, hist0's
// bins from `base`).
template <bool Count>
__device__ inline void collect_tile(const float (&v)[topk_rounds][4], std::size_t n,
                                    std::uint32_t lo, std::size_t tile, std::uint32_t* counter,
                                    std::uint32_t* __restrict__ count,
                                    std::uint32_t* __restrict__ offset, uint2* __restrict__ entries,
                                    const topk_counting& cnt) {
  namespace f = paco::compress::formula;
  using scan = cub::BlockScan<unsigned long long, topk_threads>;
  __shared__ typename scan::TempStorage tmp;
  __shared__ std::uint32_t at;
  constexpr int rounds = topk_rounds;
  // one scan of the four rounds' counts packed in 16-bit fields (each total <= 1024)
  unsigned keep = 0;  // bit 4r + e
  unsigned long long packed = 0;
#pragma unroll
  for (int r = 0; r < rounds; ++r) {
    const std::size_t i0 = tile_element(tile, r);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::uint32_t key = f::magnitude_key(v[r][e]);
      if (i0 + e < n && key >= lo) {
        keep |= 1u << (4 * r + e);
        packed += 1ull << (16 * r);
        if constexpr (Count) {
          const std::uint32_t bin = key >> 17;
          if (bin >= cnt.base) {
            const std::uint32_t b = bin - cnt.base;
            atomicAdd(&cnt.h0[b < topk_hist0_bins ? b : topk_hist0_bins - 1], 1u);
          }
        }
      }
    }
  }
  unsigned long long before = 0, total = 0;
  scan(tmp).ExclusiveSum(packed, before, total);
  std::uint32_t base[rounds], sum = 0;
#pragma unroll
  for (int r = 0; r < rounds; ++r) {
    base[r] = sum + static_cast<std::uint32_t>(before >> (16 * r) & 0xffffu);
    sum += static_cast<std::uint32_t>(total >> (16 * r) & 0xffffu);
  }
  if (threadIdx.x == 0) {
    at = sum ? atomicAdd(counter, sum) : 0u;
    count[tile] = sum;
    offset[tile] = at;
  }
  __syncthreads();
  uint2* out = entries + at;
#pragma unroll
  for (int r = 0; r < rounds; ++r) {
    const std::size_t i0 = tile_element(tile, r);
    std::uint32_t p = base[r];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (keep >> (4 * r + e) & 1u)
        out[p++] = make_uint2(__float_as_uint(v[r][e]), static_cast<std::uint32_t>(i0 + e));
  }
  __syncthreads();  // `at` and tmp are reused by the block's next tile
}

// 2. Thread blocks over tiles: each tile's elements with key >= lo, in index order, to the
// entries, counted into hist0; zeroes what finish and emit count into. The last block reads the
// cut's top 14 bits off hist0 (resolved = 14; 0 when fewer than k entries were collected or the
// cut is outside hist0's bins).
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_collect_kernel(const float* __restrict__ x, std::size_t n, bool vec, std::uint32_t k,
                        topk_state* st, unsigned long long* __restrict__ status,
                        std::uint32_t* __restrict__ count, std::uint32_t* __restrict__ offset,
                        uint2* __restrict__ entries) {
  __shared__ std::uint32_t h0[topk_hist0_bins];
  __shared__ std::uint32_t bin, rest;
  for (std::uint32_t b = threadIdx.x; b < topk_hist0_bins; b += blockDim.x) h0[b] = 0;
  if (threadIdx.x == 0) bin = ~0u;
  __syncthreads();
  const topk_counting cnt{h0, st->hist_base};
  const std::uint32_t lo = st->lo;
  const std::size_t tiles = topk_tiles(n);
  float v[topk_rounds][4], next[topk_rounds][4];
  std::size_t tile = blockIdx.x;
  if (tile < tiles) load_tile(x, n, vec, tile, next);
  for (; tile < tiles; tile += gridDim.x) {  // the next tile's loads in flight during this one
#pragma unroll
    for (int r = 0; r < topk_rounds; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) v[r][e] = next[r][e];
    if (tile + gridDim.x < tiles) load_tile(x, n, vec, tile + gridDim.x, next);
    collect_tile<true>(v, n, lo, tile, &st->entries, count, offset, entries, cnt);
  }
  {  // zero finish's histograms and the emit's look-back
    const std::size_t groups = topk_groups(tiles),
                      stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    constexpr std::size_t words =
        (offsetof(topk_state, low) - offsetof(topk_state, hist) + 4 * (std::size_t{1} << 17)) / 16;
    auto* w = reinterpret_cast<uint4*>(&st->hist[0][0]);
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
         i += stride)
      w[i] = make_uint4(0u, 0u, 0u, 0u);
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
         i < groups; i += stride)
      status[i] = 0;
  }
  if (!flush_and_check_last<topk_hist0_bins>(h0, st->hist0, &st->done[0])) return;
  if (__ldcg(&st->entries) < k) return;  // resolved = 0: finish collects every element
  find_bin<topk_hist0_bins, topk_threads, true>(st->hist0, k, &bin, &rest);
  if (bin == ~0u || bin == topk_hist0_bins - 1) return;  // outside hist0's bins: resolved = 0
  if (threadIdx.x == 0) st->prefix = cnt.base + bin, st->want = rest, st->resolved = 14;
}

// Calls f(entry) for every entry (a grid-stride loop over the dense entries, 8 loads in flight
// per thread: the entries sit in L2, so latency, not bandwidth, bounds the loop).
template <class F>
__device__ void for_each_entry(const uint2* entries, std::uint32_t m, F&& f) {
  constexpr std::uint32_t unroll = 8;
  const std::uint32_t stride = gridDim.x * blockDim.x;
  std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  for (; j + (unroll - 1) * stride < m; j += unroll * stride) {
    uint2 e[unroll];
#pragma unroll
    for (std::uint32_t u = 0; u < unroll; ++u) e[u] = __ldcg(entries + j + u * stride);
#pragma unroll
    for (std::uint32_t u = 0; u < unroll; ++u) f(e[u]);
  }
  for (; j < m; j += stride) f(__ldcg(entries + j));
}

// Key bits 30..19 of the cut among the entries (round 0 of finish when the collection left
// them open); the grid's last block to finish fixes them.
__device__ inline void topk_top_digit(const uint2* __restrict__ entries, std::uint32_t m,
                                      std::uint32_t k, topk_state* st) {
  __shared__ std::uint32_t h[4096];
  __shared__ std::uint32_t bin, rest;
  for (int b = threadIdx.x; b < 4096; b += blockDim.x) h[b] = 0;
  __syncthreads();
  for_each_entry(entries, m, [&](uint2 e) { atomicAdd(&h[(e.x & 0x7fffffffu) >> 19], 1u); });
  if (!flush_and_check_last<4096>(h, st->hist[0], &st->done[1])) return;
  find_bin<4096, topk_threads, true>(st->hist[0], k, &bin, &rest);
  if (threadIdx.x == 0) st->prefix = bin, st->want = rest;
}

// The cut's key bits below its known top `Top` bits (L = 31 - Top of them) among the entries
// under those: the top 6 of the L in shared histograms summed into hist[1], all L into `low`
// (global, zero); the grid's last block reads the 6 off hist[1], then the remaining L - 6 off the
// bins of `low` under them.
template <int Top>
__device__ void topk_low_digits(const uint2* __restrict__ entries, std::uint32_t m,
                                topk_state* st) {
  constexpr int L = 31 - Top;
  __shared__ std::uint32_t h[64];
  __shared__ std::uint32_t bin, rest;
  if (threadIdx.x < 64) h[threadIdx.x] = 0;
  __syncthreads();
  const std::uint32_t top = __ldcg(&st->prefix);
  for_each_entry(entries, m, [&](uint2 e) {
    const std::uint32_t key = e.x & 0x7fffffffu;
    if (key >> L != top) return;
    atomicAdd(&h[key >> (L - 6) & 63u], 1u);
    atomicAdd(&st->low[key & ((1u << L) - 1)], 1u);
  });
  if (!flush_and_check_last<64>(h, st->hist[1], &st->done[2])) return;
  find_bin<64, topk_threads, true>(st->hist[1], __ldcg(&st->want), &bin, &rest);
  const std::uint32_t mid = bin;
  find_bin<(1 << (L - 6)), topk_threads, true>(st->low + (mid << (L - 6)), rest, &bin, &rest);
  if (threadIdx.x == 0) st->cut_key = top << L | mid << (L - 6) | bin, st->want = rest;
}

// 3. Cooperative: the cut's bits the collection left open (normally its low 17 bits); first,
// when it collected fewer than k entries, every element.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_threads)
    topk_finish_kernel(const float* __restrict__ x, std::size_t n, bool vec, std::uint32_t k,
                       topk_state* st, std::uint32_t* __restrict__ count,
                       std::uint32_t* __restrict__ offset, uint2* __restrict__ entries) {
  auto grid = cooperative_groups::this_grid();
  bool top_open = __ldcg(&st->resolved) == 0;
  if (__ldcg(&st->entries) < k) {  // the sample misled: collect every element
    const std::size_t tiles = topk_tiles(n);
    for (std::size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      float v[topk_rounds][4];
      load_tile(x, n, vec, tile, v);
      collect_tile<false>(v, n, 0u, tile, &st->entries_all, count, offset, entries, {});
    }
    grid.sync();
    top_open = true;
  }
  const std::uint32_t m = entry_count(st, k);
  if (!top_open) return topk_low_digits<14>(entries, m, st);
  {  // low[2^17, 2^19) is not zeroed by the collection
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = (std::size_t{1} << 17) +
                         blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
         i < (std::size_t{1} << 19); i += stride)
      st->low[i] = 0;
  }
  topk_top_digit(entries, m, k, st);
  grid.sync();
  topk_low_digits<12>(entries, m, st);
}

// 4. Blocks take groups of 32 tiles in order from a ticket; a warp per tile counts its entries
// above the cut and at it; warp 0 scans the group, publishes its counts, sums the groups before
// it (looking back until one that has published its inclusive counts) and publishes its own
// inclusive counts; then each warp writes its tile's kept entries from its slot: those above the
// cut, and those at it while their rank among all cut-key entries is below the number taken.
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void __launch_bounds__(topk_emit_threads)
    topk_emit_kernel(const uint2* __restrict__ entries, const std::uint32_t* __restrict__ count,
                     const std::uint32_t* __restrict__ offset, std::size_t tiles, topk_state* st,
                     unsigned long long* status, std::uint32_t* __restrict__ out_idx,
                     float* __restrict__ out_val) {
  using ref = ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>;
  constexpr unsigned full = 0xffffffffu;
  constexpr int warps = topk_emit_threads / 32;
  __shared__ std::uint32_t group_ticket, above_of[warps], at_of[warps];
  const std::uint32_t cut = __ldcg(&st->cut_key), take_equal = __ldcg(&st->want);
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, below = (1u << lane) - 1u;
  const std::size_t groups = (tiles + warps - 1) / warps;
  for (;;) {
    if (threadIdx.x == 0) group_ticket = atomicAdd(&st->ticket, 1u);
    __syncthreads();
    const std::size_t g = group_ticket;
    if (g >= groups) return;
    const std::size_t t = g * warps + warp;
    const std::uint32_t m = t < tiles ? count[t] : 0u;
    const uint2* e = entries + (t < tiles ? offset[t] : 0u);
    constexpr std::uint32_t unroll = 8;  // loads in flight per lane (the entries sit in L2)
    std::uint32_t above = 0, at = 0;
    for (std::uint32_t j0 = 0; j0 < m; j0 += 32 * unroll) {
      std::uint32_t key[unroll];
#pragma unroll
      for (std::uint32_t u = 0; u < unroll; ++u) {
        const std::uint32_t j = j0 + 32 * u + lane;
        key[u] = j < m ? e[j].x & 0x7fffffffu : 0u;  // cached in L1 for the write pass
      }
#pragma unroll
      for (std::uint32_t u = 0; u < unroll; ++u)
        if (j0 + 32 * u + lane < m) above += key[u] > cut, at += key[u] == cut;
    }
    above = __reduce_add_sync(full, above);
    at = __reduce_add_sync(full, at);
    if (lane == 0) above_of[warp] = above, at_of[warp] = at;
    __syncthreads();
    if (warp == 0) {
      // the group's tiles: exclusive counts within the group, and its totals
      std::uint32_t a = above_of[lane], q = at_of[lane];
      std::uint32_t a_in = a, q_in = q;  // inclusive scan over lanes
      for (int d = 1; d < 32; d <<= 1) {
        const std::uint32_t a_up = __shfl_up_sync(full, a_in, d),
                            q_up = __shfl_up_sync(full, q_in, d);
        if (lane >= static_cast<unsigned>(d)) a_in += a_up, q_in += q_up;
      }
      const std::uint32_t a_total = __shfl_sync(full, a_in, 31),
                          q_total = __shfl_sync(full, q_in, 31);
      std::uint32_t a_prev = 0, q_prev = 0;  // the groups before this one
      if (g > 0) {
        if (lane == 0)
          ref(status[g]).store(
              topk_flag_aggregate | static_cast<unsigned long long>(a_total) << 31 | q_total,
              ::cuda::memory_order_relaxed);
        for (long long j = static_cast<long long>(g) - 1;; j -= 32) {  // 32 groups back at a time
          const long long p = j - lane;
          unsigned long long s = topk_flag_prefix;  // before group 0: nothing
          if (p >= 0) s = ref(status[p]).load(::cuda::memory_order_relaxed);
          while (__any_sync(full, (s >> 62) == 0))
            if ((s >> 62) == 0) s = ref(status[p]).load(::cuda::memory_order_relaxed);
          const unsigned prefixes = __ballot_sync(full, (s >> 62) == 2);
          const unsigned stop = prefixes ? __ffs(prefixes) - 1 : 31u;  // the nearest prefix
          const bool mine = lane <= stop;
          a_prev += __reduce_add_sync(
              full, mine ? static_cast<std::uint32_t>(s >> 31) & 0x7fffffffu : 0u);
          q_prev +=
              __reduce_add_sync(full, mine ? static_cast<std::uint32_t>(s) & 0x7fffffffu : 0u);
          if (prefixes) break;
        }
      }
      if (lane == 0)
        ref(status[g]).store(topk_flag_prefix |
                                 static_cast<unsigned long long>(a_prev + a_total) << 31 |
                                 (q_prev + q_total),
                             ::cuda::memory_order_relaxed);
      above_of[lane] = a_prev + a_in - a;  // exclusive, from the start of the payload
      at_of[lane] = q_prev + q_in - q;
    }
    __syncthreads();
    const std::uint32_t a0 = above_of[warp], q0 = at_of[warp];
    std::uint32_t slot = a0 + (q0 < take_equal ? q0 : take_equal), rank = q0;
    for (std::uint32_t j0 = 0; j0 < m; j0 += 32 * unroll) {  // warp-uniform trip count
      uint2 v[unroll];
#pragma unroll
      for (std::uint32_t u = 0; u < unroll; ++u) {
        const std::uint32_t j = j0 + 32 * u + lane;
        v[u] = j < m ? e[j] : make_uint2(0u, 0u);
      }
#pragma unroll
      for (std::uint32_t u = 0; u < unroll; ++u) {
        const bool in = j0 + 32 * u + lane < m;
        const std::uint32_t key = v[u].x & 0x7fffffffu;
        const bool is_equal = in && key == cut;
        const unsigned eq = __ballot_sync(full, is_equal);
        const bool keep = in && (key > cut || (is_equal && rank + __popc(eq & below) < take_equal));
        const unsigned kept = __ballot_sync(full, keep);
        if (keep) {
          const std::uint32_t p = slot + __popc(kept & below);
          out_idx[p] = v[u].y;
          out_val[p] = __uint_as_float(v[u].x);
        }
        slot += __popc(kept);
        rank += __popc(eq);
      }
    }
    __syncthreads();  // the shared counts and the ticket are reused
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

// Thread blocks of `Kernel` at `threads` that fit one multiprocessor of device `dev`, asked of
// the runtime once per device (0 on error).
template <auto Kernel>
inline int blocks_per_sm(int threads, int dev) {
  constexpr int devices = 64;  // devices beyond are asked each time
  static std::atomic<int> cache[devices] = {};
  const bool cached = dev >= 0 && dev < devices;
  if (cached)
    if (const int c = cache[dev].load(std::memory_order_relaxed); c > 0) return c;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, 0) != cudaSuccess)
    return 0;
  if (cached) cache[dev].store(per_sm, std::memory_order_relaxed);
  return per_sm;
}

}  // namespace detail

// Scratch bytes topk_select needs for n elements and k kept: the selection state (≈ 2.1 MiB),
// 8 bytes per tile of 4096 elements and per group of 32 tiles, and room for n entries (1.2·k
// to 2.6·k are used for Gaussian data; all n when the sample misleads).
inline std::size_t topk_workspace_bytes(std::size_t n, std::size_t /*k*/) {
  const std::size_t tiles = detail::topk_tiles(n);
  return scratch_arena::footprint(
      {sizeof(detail::topk_state), 8 * detail::topk_groups(tiles), 8 * tiles, n * sizeof(uint2)});
}

// Top-k of x (device, n floats) at `density` into `out` (device, 8k bytes), the same bytes as
// compress::topk::encode on the host (ties at the cut: lowest indices).
// Requires: x finite; n < 2^31; out_bytes == compress::topk{}.wire_bytes(n, density); scratch
// holds topk_workspace_bytes(n, k); a device that supports cooperative launches (all since
// sm_60). Ensures: enqueued on `stream` (a memset and four launches); no allocation, no host
// sync.
// Cost: one pass over x plus a 32768-element sample, and small passes over the entries (≈ 1.5·k);
// when the sample misleads (fewer than k elements reach its floor), a second pass collects all of
// x, and when the cut is outside the bins the collection counted, one more pass over the entries.
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
  auto* st = static_cast<detail::topk_state*>(scratch.take(sizeof(detail::topk_state)));
  const std::size_t groups = detail::topk_groups(tiles);
  auto* status_words = static_cast<unsigned long long*>(scratch.take(8 * groups));
  auto* count = static_cast<std::uint32_t*>(scratch.take(8 * tiles));
  auto* entries = static_cast<uint2*>(scratch.take(n * sizeof(uint2)));
  if (!st || !status_words || !count || !entries)
    return {errc::too_large, "topk_select: scratch smaller than topk_workspace_bytes(n, k)"};
  std::uint32_t* offset = count + tiles;
  bool vec = reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  auto kk = static_cast<std::uint32_t>(k);
  // the sample first: the device starts on it while the rest is sized here (a later failure
  // leaves only scratch written)
  if (auto s = cuda_status(cudaMemsetAsync(st, 0, offsetof(detail::topk_state, lo), stream),
                           "topk_select memset");
      !s)
    return s;
  const auto samples = static_cast<unsigned>(detail::topk_sample_count(n));
  detail::topk_sample_kernel<<<(samples + detail::topk_sample_threads - 1) /
                                   detail::topk_sample_threads,
                               detail::topk_sample_threads, 0, stream>>>(x, n, kk, st);
  int dev = 0, sms = 0;
  if (auto s = cuda_status(cudaGetDevice(&dev), "cudaGetDevice"); !s) return s;
  if (auto s = cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                           "multiprocessor count");
      !s)
    return s;
  constexpr auto finish = &detail::topk_finish_kernel<0>;
  const int per_sm = detail::blocks_per_sm<finish>(detail::topk_threads, dev);
  const int collect_per_sm =
      detail::blocks_per_sm<&detail::topk_collect_kernel<0>>(detail::topk_threads, dev);
  if (per_sm < 1 || collect_per_sm < 1)
    return {errc::unsupported, "topk_select: the top-k kernels do not fit a multiprocessor"};
  constexpr int threads = detail::topk_threads;
  const auto grid = [&](std::size_t want, int blocks_per_sm) {
    const std::size_t cap = static_cast<std::size_t>(sms) * blocks_per_sm;
    return static_cast<unsigned>(want < cap ? want : cap);
  };
  detail::topk_collect_kernel<<<grid(tiles, collect_per_sm), threads, 0, stream>>>(
      x, n, vec, kk, st, status_words, count, offset, entries);
  void* args[] = {&x, &n, &vec, &kk, &st, &count, &offset, &entries};
  if (auto s = cuda_status(
          cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(finish),
                                      dim3(static_cast<unsigned>(sms * (per_sm < 2 ? per_sm : 2))),
                                      dim3(threads), args, 0, stream),
          "topk_select cooperative launch");
      !s)
    return s;
  detail::topk_emit_kernel<<<grid(groups, 2), detail::topk_emit_threads, 0, stream>>>(
      entries, count, offset, tiles, st, status_words, reinterpret_cast<std::uint32_t*>(out),
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
