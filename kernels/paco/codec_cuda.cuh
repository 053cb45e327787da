#pragma once
// device_codec: module_codec's message protocol (compress/codec_message.hpp) with Δ, the
// error-feedback residual and the decoded output in device memory. The bodies are encoded and
// decoded on the device; only the encoded bytes cross PCIe: encode downloads the bodies and
// writes the header, level table and checksum around them on the host, decode checks a payload
// on the host and uploads its bodies. The payload is byte for byte the one module_codec::encode
// writes for the same Δ and residual (tests/gpu/test_diloco.cu), so device and host ranks share
// one wire format.
//
// Codecs with device kernels: blockwise quantisation at 2, 4 or 8 bits, absmax, deterministic
// rounding (what compress = "int8" / "int4" / "int2" build), without L-GreCo. Others: make()
// says errc::unsupported, naming the codec.
//
//   auto dc = kernels::device_codec::make(spec, segs).value_or_throw();
//   dc.encode(ctx, delta_d, residual_d, payload, &log);   // payload: host bytes for the wire
//   dc.decode(ctx, payload_of_rank_w, decoded_d, &log);
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "paco/arena_cuda.cuh"
#include "paco/compress/codec_message.hpp"
#include "paco/compress/quantize.hpp"
#include "paco/compress/segments.hpp"
#include "paco/compress/spec.hpp"
#include "paco/context_cuda.cuh"
#include "paco/core/hash.hpp"
#include "paco/cuda_buffer.cuh"
#include "paco/elementwise.cuh"
#include "paco/quantize.cuh"

namespace paco::kernels {

class device_codec {
 public:
  // Errors: unsupported for a codec without device kernels (see the file comment);
  // invalid_argument for segments that do not tile [0, n) in order.
  static result<device_codec> make(const compress::compress_spec& spec,
                                   std::vector<compress::segment> segs) {
    if (spec.kind != compress::codec_kind::quantize || spec.lgreco || spec.minmax ||
        (spec.bits != 2 && spec.bits != 4 && spec.bits != 8))
      return error(
          errc::unsupported,
          "device_codec: compress = \"" + compress::to_string(spec) +
              "\" has no device kernels (int8, int4 and int2 do, absmax; or train on the host)");
    device_codec c;
    c.spec_ = spec;
    c.cfg_ = {.bits = spec.bits};
    std::size_t at = 0, body = 0;
    const compress::quantize q(c.cfg_);
    for (auto& s : segs) {
      if (s.offset != at || s.size() == 0)
        return error(errc::invalid_argument, "device_codec: segments must tile the span in order");
      at += s.size();
      c.body_offset_.push_back(body);
      body += q.wire_bytes(s.size(), spec.bits);
    }
    c.body_bytes_ = body;
    c.n_ = at;
    c.segs_ = std::move(segs);
    c.layout_ = compress::layout_hash(c.segs_);
    try {
      c.bodies_.resize(body);
      c.sent_.resize(c.n_);
    } catch (const std::bad_alloc&) {
      return error(errc::unsupported, "device_codec: no device room for the codec's buffers");
    }
    return result<device_codec>(std::move(c));
  }

  std::size_t size() const noexcept { return n_; }
  const compress::compress_spec& spec() const noexcept { return spec_; }
  bool error_feedback() const noexcept { return spec_.error_feedback; }
  // Bytes of every payload of this codec (the header, levels and bodies).
  std::size_t payload_bytes() const noexcept { return head() + body_bytes_; }

  // out = the message of Δ (device, size() floats). With error feedback, residual (device,
  // size() floats) ← Δ + residual − decode(out) and the payload codes Δ + residual. Ensures: out
  // is final on return (the stream is synchronised). log counts the bodies' download.
  status encode(cuda_context& ctx, const float* delta, float* residual, std::vector<std::byte>& out,
                transfer_log* log = nullptr) {
    const cudaStream_t st = ctx.stream();
    const bool ef = error_feedback();
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      const std::size_t o = segs_[s].offset, m = segs_[s].size(), bb = body(s);
      const float* x = delta + o;
      if (ef) {
        if (auto e = ef_accumulate(delta + o, residual + o, m, st); !e) return e;
        x = residual + o;
      }
      if (auto e = quantize_blockwise(x, m, cfg_, spec_.bits, 0, bodies_.data() + body_offset_[s],
                                      bb, st);
          !e)
        return e;
      if (!ef) continue;
      cuda_context::frame f(ctx);
      if (auto e = dequantize_blockwise(bodies_.data() + body_offset_[s], bb, m, cfg_, spec_.bits,
                                        sent_.data() + o, ctx.scratch(), st);
          !e)
        return e;
      if (auto e = ef_subtract(residual + o, sent_.data() + o, m, st); !e) return e;
    }
    out.resize(payload_bytes());
    if (auto e = cuda_status(cudaMemcpyAsync(out.data() + head(), bodies_.data(), body_bytes_,
                                             cudaMemcpyDeviceToHost, st),
                             "device_codec body download");
        !e)
      return e;
    if (log) log->d2h_bytes += body_bytes_, ++log->d2h_copies;
    if (auto e = ctx.synchronize(); !e) return e;
    std::byte* p = out.data() + sizeof(compress::payload_header);
    for (std::size_t s = 0; s < segs_.size(); ++s, p += 8) {
      const double l = spec_.bits;
      std::memcpy(p, &l, 8);
    }
    compress::payload_header h{compress::payload_magic,
                               compress::payload_version,
                               static_cast<std::uint8_t>(spec_.kind),
                               static_cast<std::uint8_t>(ef ? 1 : 0),
                               static_cast<std::uint32_t>(segs_.size()),
                               0,
                               n_,
                               layout_,
                               0};
    h.check = hash64(out.data() + sizeof h, out.size() - sizeof h);
    std::memcpy(out.data(), &h, sizeof h);
    return {};
  }

  // y (device, size() floats) = the decode of a payload. The header, level table and checksum
  // are checked on the host first (errors as module_codec::decode: corrupt, version, mismatch),
  // then the bodies are uploaded and decoded. A body whose scale is not finite and ≥ 0 is
  // corrupt (checked on the device; the stream is synchronised to read the count).
  status decode(cuda_context& ctx, std::span<const std::byte> in, float* y,
                transfer_log* log = nullptr) {
    compress::payload_header h;
    if (in.size() < sizeof h)
      return {errc::corrupt, "compressed payload of " + std::to_string(in.size()) +
                                 " bytes is shorter than its header"};
    std::memcpy(&h, in.data(), sizeof h);
    if (h.magic != compress::payload_magic)
      return {errc::corrupt, "not a compressed payload (bad magic)"};
    if (h.version != compress::payload_version)
      return {errc::version, "compressed payload version " + std::to_string(h.version) +
                                 ", this build reads " + std::to_string(compress::payload_version)};
    if (h.codec != static_cast<std::uint8_t>(spec_.kind))
      return {errc::mismatch,
              "payload of another codec; this receiver decodes " + compress::to_string(spec_)};
    if (h.elements != n_ || h.segments != segs_.size() || h.layout != layout_)
      return {errc::mismatch, "payload for a module of " + std::to_string(h.elements) +
                                  " elements in " + std::to_string(h.segments) +
                                  " segments; this module has " + std::to_string(n_) + " in " +
                                  std::to_string(segs_.size()) + " (or another layout)"};
    if (in.size() != payload_bytes())
      return {errc::corrupt, "compressed payload is " + std::to_string(in.size()) +
                                 " bytes, this codec's are " + std::to_string(payload_bytes())};
    if (hash64(in.data() + sizeof h, in.size() - sizeof h) != h.check)
      return {errc::corrupt, "compressed payload failed its checksum"};
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      double l;
      std::memcpy(&l, in.data() + sizeof h + 8 * s, 8);
      if (l != double(spec_.bits))  // the device codec's payloads all carry the default level
        return {errc::corrupt, "compressed payload names level " + std::to_string(l) +
                                   " for segment " + std::to_string(s) + ", this codec codes " +
                                   std::to_string(spec_.bits) + " bits"};
    }
    const cudaStream_t st = ctx.stream();
    if (auto e = cuda_status(cudaMemcpyAsync(bodies_.data(), in.data() + head(), body_bytes_,
                                             cudaMemcpyHostToDevice, st),
                             "device_codec body upload");
        !e)
      return e;
    if (log) log->h2d_bytes += body_bytes_, ++log->h2d_copies;
    cuda_context::frame f(ctx);
    auto* bad_total = ctx.take<unsigned>(segs_.size());
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      unsigned* bad = nullptr;
      if (auto e =
              dequantize_blockwise(bodies_.data() + body_offset_[s], body(s), segs_[s].size(), cfg_,
                                   spec_.bits, y + segs_[s].offset, ctx.scratch(), st, &bad);
          !e)
        return e;
      if (auto e = cuda_status(
              cudaMemcpyAsync(bad_total + s, bad, sizeof(unsigned), cudaMemcpyDeviceToDevice, st),
              "device_codec bad-block count");
          !e)
        return e;
    }
    std::vector<unsigned> bad(segs_.size());
    if (auto e = cuda_status(cudaMemcpyAsync(bad.data(), bad_total, bad.size() * sizeof(unsigned),
                                             cudaMemcpyDeviceToHost, st),
                             "device_codec bad-block download");
        !e)
      return e;
    if (log) log->d2h_bytes += bad.size() * sizeof(unsigned), ++log->d2h_copies;
    if (auto e = ctx.synchronize(); !e) return e;
    for (std::size_t s = 0; s < bad.size(); ++s)
      if (bad[s])
        return {errc::corrupt, "compressed payload: " + std::to_string(bad[s]) +
                                   " scale block(s) of segment " + std::to_string(s) +
                                   " have a negative or non-finite scale"};
    return {};
  }

 private:
  device_codec() = default;
  std::size_t head() const noexcept { return compress::detail::message_header_bytes(segs_.size()); }
  std::size_t body(std::size_t s) const noexcept {
    return (s + 1 < segs_.size() ? body_offset_[s + 1] : body_bytes_) - body_offset_[s];
  }

  compress::compress_spec spec_{};
  compress::quantize_config cfg_{};
  std::vector<compress::segment> segs_;
  std::vector<std::size_t> body_offset_;
  std::size_t body_bytes_ = 0;
  std::size_t n_ = 0;
  std::uint64_t layout_ = 0;
  buffer<std::byte, cuda> bodies_;
  buffer<float, cuda> sent_;
};

}  // namespace paco::kernels
