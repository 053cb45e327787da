#pragma once
// CUDA blockwise quantisation with the host codec's wire format (paco/compress/quantize.hpp),
// byte for byte: one thread block per scale block, the block's absmax or min/max by
// cub::BlockReduce, codes from the shared formulas (compress/detail/formulas.hpp).
//
// Legend: n elements, B elements per scale block, nb = ceil(n/B) blocks, bits ∈ {2,4,8} (the host
// codec also has 3, 5, 6 and 7 bits; these kernels refuse them with errc::unsupported).
//   payload: scales f32[nb] | mins f32[nb] (min-max only) | codes ceil(n·bits/8) bytes

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <cub/block/block_reduce.cuh>

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

// One block of `Threads` threads per scale block. x: (n), out: the payload.
template <int Threads>
__global__ void quantize_kernel(const float* __restrict__ x, std::size_t n, std::size_t block,
                                int bits, bool minmax, bool stochastic, std::uint64_t key,
                                std::uint8_t* __restrict__ out) {
  namespace f = paco::compress::formula;
  const std::size_t nb = (n + block - 1) / block;
  const std::size_t b = blockIdx.x;
  const std::size_t i0 = b * block;
  const std::size_t len = n - i0 < block ? n - i0 : block;
  float* scales = reinterpret_cast<float*>(out);
  float* mins = scales + nb;
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
      scales[b] = f::block_scale(amax, qmax);
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
      scales[b] = f::block_scale(r.hi - r.lo, qmax);
      mins[b] = r.lo;
      s_lo = r.lo;
      s_inv = f::block_inverse(r.hi - r.lo, qmax);
    }
  }
  __syncthreads();
  const float inv = s_inv, lo = s_lo;
  const int per = 8 / bits;  // codes per byte
  const std::size_t bytes = (len * static_cast<std::size_t>(bits) + 7) / 8;
  std::uint8_t* cb = codes + i0 * static_cast<std::size_t>(bits) / 8;  // i0·bits is byte aligned
  for (std::size_t t = threadIdx.x; t < bytes; t += Threads) {
    unsigned byte = 0;
    for (int k = 0; k < per; ++k) {
      const std::size_t j = t * per + k;
      if (j >= len) break;
      const float u = stochastic ? f::dither(key, i0 + j) : -1.0f;
      unsigned c;
      if (minmax) {
        c = static_cast<unsigned>(f::minmax_code(x[i0 + j], lo, inv, f::minmax_qmax(bits), u));
      } else {
        const int q = f::absmax_code(x[i0 + j], inv, f::absmax_qmax(bits), u);
        c = bits == 8 ? static_cast<unsigned>(q) & 0xffu
                      : static_cast<unsigned>(q + (1 << (bits - 1)));
      }
      byte |= c << (k * bits);
    }
    cb[t] = static_cast<std::uint8_t>(byte);
  }
}

// One thread per code byte. bad: optional count of blocks with a bad scale or minimum
// (they decode to zeros).
template <int = 0>  // a template: no duplicate symbols when many .cu files include this
__global__ void dequantize_kernel(const std::uint8_t* __restrict__ in, std::size_t n,
                                  std::size_t block, int bits, bool minmax, float* __restrict__ y,
                                  unsigned* bad) {
  namespace f = paco::compress::formula;
  const std::size_t nb = (n + block - 1) / block;
  const float* scales = reinterpret_cast<const float*>(in);
  const float* mins = scales + nb;
  const std::uint8_t* codes = in + nb * (minmax ? 8 : 4);
  const int per = 8 / bits;
  const std::size_t total = (n * static_cast<std::size_t>(bits) + 7) / 8;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const unsigned byte = codes[t];
    const std::size_t i = t * per;  // first element of this byte; a byte never spans blocks
    const std::size_t b = i / block;
    const float s = scales[b];
    const float lo = minmax ? mins[b] : 0.0f;
    const bool ok = s >= 0.0f && isfinite(s) && isfinite(lo);
    if (!ok && bad && i % block == 0) atomicAdd(bad, 1u);
    for (int k = 0; k < per && i + k < n; ++k) {
      const unsigned c = (byte >> (k * bits)) & ((1u << bits) - 1u);
      float v;
      if (minmax)
        v = f::minmax_value(static_cast<int>(c), s, lo);
      else
        v = f::absmax_value(bits == 8 ? static_cast<int>(static_cast<std::int8_t>(c))
                                      : static_cast<int>(c) - (1 << (bits - 1)),
                            s);
      y[i + k] = ok ? v : 0.0f;
    }
  }
}

}  // namespace detail

// Quantises x (device, n floats) into the payload `out` (device, wire_bytes(n, bits) bytes) with
// the same bytes as compress::quantize::encode_with_key(x, bits, key, out) on the host.
// Requires: validate(cfg) with bits; out of exactly codec.wire_bytes(n, bits) bytes (checked).
// Ensures: enqueued on `stream`; no allocation. Cost: reads 4n, writes ~n·bits/8 bytes.
// The bit widths these kernels pack (a code never straddles a byte). Ensures: ok iff 2, 4, 8.
inline status check_kernel_bits(const char* who, int bits) {
  if (bits == 2 || bits == 4 || bits == 8) return {};
  return {errc::unsupported, std::string(who) + ": bits = " + std::to_string(bits) +
                                 ", the CUDA kernels pack 2, 4 or 8 (3, 5, 6, 7: host codec)"};
}

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
  detail::quantize_kernel<256><<<static_cast<unsigned>(nb), 256, 0, stream>>>(
      x, n, c.block, bits, c.scale == compress::scale_mode::minmax, c.stochastic, key,
      reinterpret_cast<std::uint8_t*>(out));
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
// Requires: in of in_bytes bytes on the device. Ensures: enqueued on `stream`; no allocation.
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
  detail::dequantize_kernel<<<elementwise_blocks(bytes), 256, 0, stream>>>(
      reinterpret_cast<const std::uint8_t*>(in), n, c.block, bits,
      c.scale == compress::scale_mode::minmax, y, bad);
  return cuda_status(cudaGetLastError(), "dequantize_blockwise launch");
}

}  // namespace paco::kernels
