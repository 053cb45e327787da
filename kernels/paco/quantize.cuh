#pragma once
// CUDA blockwise quantisation with the host codec's wire format (paco/compress/quantize.hpp),
// byte for byte, codes from the shared formulas (compress/detail/formulas.hpp). Full scale
// blocks of aligned data go to the fast kernels (one warp per scale block, float4 loads, the
// absmax or min/max by warp shuffles, one 1/2/4-byte code word per 4 elements); a partial last
// block and unaligned data go to the general ones (one thread block per scale block,
// cub::BlockReduce).
//
// Legend: n elements, B elements per scale block, nb = ceil(n/B) blocks, bits ∈ {2,4,8} (the host
// codec also has 3, 5, 6 and 7 bits; these kernels refuse them with errc::unsupported).
//   payload: scales f32[nb] | mins f32[nb] (min-max only) | codes ceil(n·bits/8) bytes

#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <string>

#include "paco/compress/detail/formulas.hpp"
#include "paco/compress/quantize.hpp"
#include "paco/cuda_check.cuh"
#include "paco/scratch.cuh"

namespace paco::kernels {

namespace detail {

struct min_max_pair {
  float lo, hi;
};
struct min_max_op {
  __device__ min_max_pair operator()(const min_max_pair& a, const min_max_pair& b) const {
    return {fminf(a.lo, b.lo), fmaxf(a.hi, b.hi)};
  }
};
struct max_op {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// A payload float at any byte address (the general kernels accept unaligned payloads).
__device__ inline void put_f32(std::uint8_t* p, float v) {
  const unsigned u = __float_as_uint(v);
  p[0] = static_cast<std::uint8_t>(u);
  p[1] = static_cast<std::uint8_t>(u >> 8);
  p[2] = static_cast<std::uint8_t>(u >> 16);
  p[3] = static_cast<std::uint8_t>(u >> 24);
}
__device__ inline float get_f32(const std::uint8_t* p) {
  return __uint_as_float(p[0] | static_cast<unsigned>(p[1]) << 8 |
                         static_cast<unsigned>(p[2]) << 16 | static_cast<unsigned>(p[3]) << 24);
}

// The code of element i of a scale block (lo, inv from its absmax or min/max), in its stored
// form; word() packs 4 of them low bits first, as the host does.
struct block_code {
  int bits;
  bool minmax, stochastic;
  std::uint64_t key;
  float lo, inv;
  __device__ unsigned code(float x, std::size_t i) const {
    namespace f = paco::compress::formula;
    const float u = stochastic ? f::dither(key, i) : -1.0f;
    if (minmax) return static_cast<unsigned>(f::minmax_code(x, lo, inv, f::minmax_qmax(bits), u));
    return f::absmax_store(f::absmax_code(x, inv, f::absmax_qmax(bits), u), bits);
  }
  // Codes of the 4 elements from element i, packed low bits first.
  __device__ unsigned word(const float4& v, std::size_t i) const {
    return code(v.x, i) | code(v.y, i + 1) << bits | code(v.z, i + 2) << 2 * bits |
           code(v.w, i + 3) << 3 * bits;
  }
};

// The value of a stored code c of a block with scale s and minimum lo (0 for absmax).
__device__ inline float code_value(unsigned c, int bits, bool minmax, float s, float lo) {
  namespace f = paco::compress::formula;
  if (minmax) return f::minmax_value(static_cast<int>(c), s, lo);
  return f::absmax_value(f::absmax_load(c, bits), s);
}

// The general kernel: one block of `Threads` threads per scale block, from scale block
// `first` on (any block size, any alignment; the fast kernel below leaves it the tail).
// x: (n), out: the payload.
template <int Threads>
__global__ void quantize_kernel(const float* __restrict__ x, std::size_t n, std::size_t block,
                                int bits, bool minmax, bool stochastic, std::uint64_t key,
                                std::uint8_t* __restrict__ out, std::size_t first) {
  namespace f = paco::compress::formula;
  const std::size_t nb = (n + block - 1) / block;
  const std::size_t b = first + blockIdx.x;
  const std::size_t i0 = b * block;
  const std::size_t len = n - i0 < block ? n - i0 : block;
  std::uint8_t* scales = out;  // f32[nb], then the minima f32[nb] (min-max)
  std::uint8_t* codes = out + nb * (minmax ? 8 : 4);

  __shared__ float s_lo, s_inv;
  if (!minmax) {
    using reduce = cub::BlockReduce<float, Threads>;
    __shared__ typename reduce::TempStorage tmp;
    float m = 0.0f;
    for (std::size_t j = threadIdx.x; j < len; j += Threads) m = f::max_f(m, f::abs_f(x[i0 + j]));
    const float amax = reduce(tmp).Reduce(m, max_op{});
    if (threadIdx.x == 0) {
      const int qmax = f::absmax_qmax(bits);
      put_f32(scales + 4 * b, f::block_scale(amax, qmax));
      s_inv = f::block_inverse(amax, qmax);
      s_lo = 0.0f;
    }
  } else {
    using reduce = cub::BlockReduce<min_max_pair, Threads>;
    __shared__ typename reduce::TempStorage tmp;
    min_max_pair p{x[i0], x[i0]};
    for (std::size_t j = threadIdx.x; j < len; j += Threads) {
      p.lo = f::min_f(p.lo, x[i0 + j]);
      p.hi = f::max_f(p.hi, x[i0 + j]);
    }
    const min_max_pair r = reduce(tmp).Reduce(p, min_max_op{});
    if (threadIdx.x == 0) {
      const int qmax = f::minmax_qmax(bits);
      put_f32(scales + 4 * b, f::block_scale(r.hi - r.lo, qmax));
      put_f32(scales + 4 * (nb + b), r.lo);
      s_lo = r.lo;
      s_inv = f::block_inverse(r.hi - r.lo, qmax);
    }
  }
  __syncthreads();
  const block_code bc{bits, minmax, stochastic, key, s_lo, s_inv};
  const int per = 8 / bits;  // codes per byte
  const std::size_t bytes = (len * static_cast<std::size_t>(bits) + 7) / 8;
  std::uint8_t* cb = codes + i0 * static_cast<std::size_t>(bits) / 8;  // i0·bits is byte aligned
  for (std::size_t t = threadIdx.x; t < bytes; t += Threads) {
    unsigned byte = 0;
    for (int k = 0; k < per; ++k) {
      const std::size_t j = t * per + k;
      if (j >= len) break;
      byte |= bc.code(x[i0 + j], i0 + j) << (k * bits);
    }
    cb[t] = static_cast<std::uint8_t>(byte);
  }
}

// The general decoder: one thread per code byte from code byte `first` on. bad: optional count
// of blocks with a bad scale or minimum (they decode to zeros).
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void dequantize_kernel(const std::uint8_t* __restrict__ in, std::size_t n,
                                  std::size_t block, int bits, bool minmax, float* __restrict__ y,
                                  unsigned* bad, std::size_t first) {
  namespace f = paco::compress::formula;
  const std::size_t nb = (n + block - 1) / block;
  const std::uint8_t* scales = in;
  const std::uint8_t* codes = in + nb * (minmax ? 8 : 4);
  const int per = 8 / bits;
  const std::size_t total = (n * static_cast<std::size_t>(bits) + 7) / 8;
  for (std::size_t t = first + blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
       t < total; t += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const unsigned byte = codes[t];
    const std::size_t i = t * per;  // first element of this byte; a byte never spans blocks
    const std::size_t b = i / block;
    const float s = get_f32(scales + 4 * b);
    const float lo = minmax ? get_f32(scales + 4 * (nb + b)) : 0.0f;
    const bool ok = f::block_decodable(s, lo);
    if (!ok && bad && i % block == 0) atomicAdd(bad, 1u);
    for (int k = 0; k < per && i + k < n; ++k) {
      const unsigned c = (byte >> (k * bits)) & ((1u << bits) - 1u);
      y[i + k] = ok ? code_value(c, bits, minmax, s, lo) : 0.0f;
    }
  }
}

// ---- the fast kernels: one warp per full scale block, each lane a group of 4 elements ----
// Requires (checked by the launchers, which use the general kernels otherwise): x or y 16-byte
// aligned, the payload 4-byte aligned, block % 16 == 0. Then a group is one float4 and its
// code word (4·bits bits, codes low bits first as the host packs them) one aligned 1, 2 or
// 4-byte store. V > 0: a lane holds its V groups in registers (blocks of up to 128·V
// elements); V == 0: any block size, the block is read twice (the second time from cache).

__device__ inline float warp_max(float v) {
  namespace f = paco::compress::formula;
  for (int o = 16; o > 0; o >>= 1) v = f::max_f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_min(float v) {
  namespace f = paco::compress::formula;
  for (int o = 16; o > 0; o >>= 1) v = f::min_f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ inline void store_word(std::uint8_t* codes, std::size_t group, int bits, unsigned w) {
  if (bits == 8)
    reinterpret_cast<std::uint32_t*>(codes)[group] = w;
  else if (bits == 4)
    reinterpret_cast<std::uint16_t*>(codes)[group] = static_cast<std::uint16_t>(w);
  else
    codes[group] = static_cast<std::uint8_t>(w);
}
__device__ inline unsigned load_word(const std::uint8_t* codes, std::size_t group, int bits) {
  if (bits == 8) return reinterpret_cast<const std::uint32_t*>(codes)[group];
  if (bits == 4) return reinterpret_cast<const std::uint16_t*>(codes)[group];
  return codes[group];
}

// Full scale blocks 0..full-1 of the payload (nb blocks in all).
template <int V>
__global__ void quantize_warp_kernel(const float4* __restrict__ x, std::size_t full, std::size_t nb,
                                     std::size_t block, int bits, bool minmax, bool stochastic,
                                     std::uint64_t key, std::uint8_t* __restrict__ out) {
  namespace f = paco::compress::formula;
  const std::size_t b = (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x) / 32;
  if (b >= full) return;  // b is the same for the whole warp
  const unsigned lane = threadIdx.x % 32;
  const std::size_t groups = block / 4;
  const float4* xb = x + b * groups;
  float am = 0.0f, lo = 3.40282347e38f, hi = -3.40282347e38f;
  auto take = [&](const float4& v) {
    if (minmax) {
      lo = f::min_f(f::min_f(lo, v.x), f::min_f(v.y, f::min_f(v.z, v.w)));
      hi = f::max_f(f::max_f(hi, v.x), f::max_f(v.y, f::max_f(v.z, v.w)));
    } else {
      am = f::max_f(f::max_f(am, f::abs_f(v.x)),
                    f::max_f(f::abs_f(v.y), f::max_f(f::abs_f(v.z), f::abs_f(v.w))));
    }
  };
  [[maybe_unused]] float4 held[V > 0 ? V : 1];
  if constexpr (V > 0) {
#pragma unroll
    for (int r = 0; r < V; ++r) {
      const std::size_t j = lane + 32 * r;
      if (j < groups) {
        held[r] = xb[j];
        take(held[r]);
      }
    }
  } else {
    for (std::size_t j = lane; j < groups; j += 32) take(xb[j]);
  }
  block_code bc{bits, minmax, stochastic, key, 0.0f, 0.0f};
  float s;
  if (minmax) {
    lo = warp_min(lo);
    hi = warp_max(hi);
    s = f::block_scale(hi - lo, f::minmax_qmax(bits));
    bc.lo = lo;
    bc.inv = f::block_inverse(hi - lo, f::minmax_qmax(bits));
  } else {
    am = warp_max(am);
    s = f::block_scale(am, f::absmax_qmax(bits));
    bc.inv = f::block_inverse(am, f::absmax_qmax(bits));
  }
  float* scales = reinterpret_cast<float*>(out);
  if (lane == 0) {
    scales[b] = s;
    if (minmax) scales[nb + b] = lo;
  }
  std::uint8_t* codes = out + nb * (minmax ? 8 : 4);
  const std::size_t g0 = b * groups;  // first group of this block, counted from element 0
  if constexpr (V > 0) {
#pragma unroll
    for (int r = 0; r < V; ++r) {
      const std::size_t j = lane + 32 * r;
      if (j < groups) store_word(codes, g0 + j, bits, bc.word(held[r], 4 * (g0 + j)));
    }
  } else {
    for (std::size_t j = lane; j < groups; j += 32)
      store_word(codes, g0 + j, bits, bc.word(xb[j], 4 * (g0 + j)));
  }
}

// Decodes full scale blocks 0..full-1 (nb in all) into y; bad as in dequantize_kernel.
template <int V>
__global__ void dequantize_warp_kernel(const std::uint8_t* __restrict__ in, std::size_t full,
                                       std::size_t nb, std::size_t block, int bits, bool minmax,
                                       float4* __restrict__ y, unsigned* bad) {
  namespace f = paco::compress::formula;
  const std::size_t b = (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x) / 32;
  if (b >= full) return;
  const unsigned lane = threadIdx.x % 32;
  const std::size_t groups = block / 4, g0 = b * groups;
  const float* scales = reinterpret_cast<const float*>(in);
  const std::uint8_t* codes = in + nb * (minmax ? 8 : 4);
  const float s = scales[b];
  const float lo = minmax ? scales[nb + b] : 0.0f;
  const bool ok = f::block_decodable(s, lo);
  if (!ok && bad && lane == 0) atomicAdd(bad, 1u);
  const unsigned mask = (1u << bits) - 1u;
  auto value = [&](unsigned c) { return code_value(c, bits, minmax, s, lo); };
  auto emit = [&](std::size_t j, unsigned w) {
    const float4 v = ok ? make_float4(value(w & mask), value(w >> bits & mask),
                                      value(w >> 2 * bits & mask), value(w >> 3 * bits & mask))
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    y[g0 + j] = v;
  };
  if constexpr (V > 0) {
    unsigned w[V];
#pragma unroll
    for (int r = 0; r < V; ++r)
      if (lane + 32 * r < groups) w[r] = load_word(codes, g0 + lane + 32 * r, bits);
#pragma unroll
    for (int r = 0; r < V; ++r)
      if (lane + 32 * r < groups) emit(lane + 32 * r, w[r]);
  } else {
    for (std::size_t j = lane; j < groups; j += 32) emit(j, load_word(codes, g0 + j, bits));
  }
}

// Whether the fast kernels apply (see their Requires).
inline bool warp_path(const void* floats, const void* payload, std::size_t block) {
  return reinterpret_cast<std::uintptr_t>(floats) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(payload) % 4 == 0 && block % 16 == 0;
}
constexpr std::size_t warp_held = 2;  // register-held groups per lane: blocks of up to 256

}  // namespace detail

// The bit widths these kernels pack (a code never straddles a byte). Ensures: ok iff 2, 4, 8.
inline status check_kernel_bits(const char* who, int bits) {
  if (bits == 2 || bits == 4 || bits == 8) return {};
  return {errc::unsupported, std::string(who) + ": bits = " + std::to_string(bits) +
                                 ", the CUDA kernels pack 2, 4 or 8 (3, 5, 6, 7: host codec)"};
}

// Quantises x (device, n floats) into the payload `out` (device, wire_bytes(n, bits) bytes) with
// the same bytes as compress::quantize::encode_with_key(x, bits, key, out) on the host.
// Requires: validate(cfg) with bits; out of exactly codec.wire_bytes(n, bits) bytes (checked).
// Any alignment of x and out (16-byte x and 4-byte out take the fast kernel).
// Ensures: enqueued on `stream`; no allocation. Cost: reads 4n, writes ~n·bits/8 bytes.
inline status quantize_blockwise(const float* x, std::size_t n,
                                 const compress::quantize_config& cfg, int bits, std::uint64_t key,
                                 std::byte* out, std::size_t out_bytes, cudaStream_t stream) {
  compress::quantize_config c = cfg;
  c.bits = bits;
  if (auto s = compress::validate(c); !s) return s;
  if (auto s = check_kernel_bits("quantize_blockwise", bits); !s) return s;
  const compress::quantize codec(c);
  if (out_bytes != codec.wire_bytes(n, bits))
    return {errc::invalid_argument, "quantize_blockwise: output is not wire_bytes(n, bits)"};
  if (n == 0) return {};
  const std::size_t nb = codec.blocks(n);
  const bool minmax = c.scale == compress::scale_mode::minmax;
  auto* o = reinterpret_cast<std::uint8_t*>(out);
  std::size_t full = 0;  // scale blocks the fast kernel codes; the general kernel takes the rest
  if (detail::warp_path(x, out, c.block)) {
    full = n / c.block;
    const auto grid = static_cast<unsigned>((full + 7) / 8);  // 8 warps of 32 per thread block
    const auto* x4 = reinterpret_cast<const float4*>(x);
    if (full > 0 && c.block <= 128 * detail::warp_held)
      detail::quantize_warp_kernel<detail::warp_held>
          <<<grid, 256, 0, stream>>>(x4, full, nb, c.block, bits, minmax, c.stochastic, key, o);
    else if (full > 0)
      detail::quantize_warp_kernel<0>
          <<<grid, 256, 0, stream>>>(x4, full, nb, c.block, bits, minmax, c.stochastic, key, o);
  }
  if (full < nb)
    detail::quantize_kernel<256><<<static_cast<unsigned>(nb - full), 256, 0, stream>>>(
        x, n, c.block, bits, minmax, c.stochastic, key, o, full);
  return cuda_status(cudaGetLastError(), "quantize_blockwise launch");
}

// Scratch bytes dequantize_blockwise takes (the bad-block counter).
inline std::size_t dequantize_workspace_bytes() {
  return scratch_arena::footprint({sizeof(unsigned)});
}

// Decodes a payload on the device into y (n floats), like compress::quantize::decode. Sizes are
// checked on the host; blocks whose scale or minimum is negative/non-finite decode to zeros and
// are counted into *bad_blocks (a device counter taken from `scratch`, zeroed here) when the
// caller asks for it (bad_blocks_out non-null receives that device pointer).
// Requires: in of in_bytes bytes on the device (any alignment; 4-byte in and 16-byte y take the
// fast kernel). Ensures: enqueued on `stream`; no allocation.
template <ScratchAllocator S>
status dequantize_blockwise(const std::byte* in, std::size_t in_bytes, std::size_t n,
                            const compress::quantize_config& cfg, int bits, float* y, S& scratch,
                            cudaStream_t stream, unsigned** bad_blocks_out = nullptr) {
  compress::quantize_config c = cfg;
  c.bits = bits;
  if (auto s = compress::validate(c); !s) return s;
  if (auto s = check_kernel_bits("dequantize_blockwise", bits); !s) return s;
  const compress::quantize codec(c);
  if (in_bytes != codec.wire_bytes(n, bits))
    return {errc::corrupt, "dequantize_blockwise: payload is not wire_bytes(n, bits)"};
  auto* bad = static_cast<unsigned*>(scratch.take(sizeof(unsigned)));
  if (!bad) return {errc::too_large, "dequantize_blockwise: scratch exhausted"};
  if (auto s = cuda_status(cudaMemsetAsync(bad, 0, sizeof(unsigned), stream), "memset"); !s)
    return s;
  if (bad_blocks_out) *bad_blocks_out = bad;
  if (n == 0) return {};
  const std::size_t bytes = (n * static_cast<std::size_t>(bits) + 7) / 8;
  const std::size_t nb = codec.blocks(n);
  const bool minmax = c.scale == compress::scale_mode::minmax;
  const auto* p = reinterpret_cast<const std::uint8_t*>(in);
  std::size_t full = 0;  // scale blocks the fast kernel decodes; the general kernel the rest
  if (detail::warp_path(y, in, c.block)) {
    full = n / c.block;
    const auto grid = static_cast<unsigned>((full + 7) / 8);
    auto* y4 = reinterpret_cast<float4*>(y);
    if (full > 0 && c.block <= 128 * detail::warp_held)
      detail::dequantize_warp_kernel<detail::warp_held>
          <<<grid, 256, 0, stream>>>(p, full, nb, c.block, bits, minmax, y4, bad);
    else if (full > 0)
      detail::dequantize_warp_kernel<0>
          <<<grid, 256, 0, stream>>>(p, full, nb, c.block, bits, minmax, y4, bad);
  }
  const std::size_t first = full * c.block * static_cast<std::size_t>(bits) / 8;
  if (first < bytes)
    detail::dequantize_kernel<<<elementwise_blocks(bytes - first), 256, 0, stream>>>(
        p, n, c.block, bits, minmax, y, bad, first);
  return cuda_status(cudaGetLastError(), "dequantize_blockwise launch");
}

}  // namespace paco::kernels
