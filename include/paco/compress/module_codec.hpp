#pragma once
// module_codec: the runtime codec of one module's pseudo-gradient, built from a compress_spec
// (a trainer's `compress = "int8"`) and the module's segment table (segments.hpp). It hides
// which codec runs behind one type, keeps the sender's state (codec scratch, L-GreCo's
// accumulators and levels) and leaves the error-feedback residual with the caller (the worker's
// arena, plane::residual), so a worker holds one module_codec per module it pushes and a store
// one per module it decodes.
//
// Three ways to move a module's Δ, by codec (docs/compression.md), each in its own header:
//   message  every codec but PowerSGD: one self-checking payload per worker; a store decodes
//            it, an all-reduce DiLoCo all-gathers the payloads and decodes each
//            (codec_message.hpp).
//   summed   fp32, bf16, fp16 on an all-reduce: the bare element array, added on the wire
//            (codec_summed.hpp).
//   rounds   PowerSGD: two float rounds, each summed over the workers before the next
//            (codec_rounds.hpp).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "paco/compress/codec_message.hpp"
#include "paco/compress/codec_rounds.hpp"
#include "paco/compress/codec_summed.hpp"
#include "paco/compress/lgreco.hpp"
#include "paco/compress/powersgd.hpp"
#include "paco/compress/segments.hpp"
#include "paco/compress/spec.hpp"

namespace paco::compress {

struct module_codec_options {
  // L-GreCo (lgreco:int, lgreco:topk:D): levels re-chosen every `period` rounds (F) from the
  // pseudo-gradients of the last `window` rounds (A <= F), budget α·Σ e(default level).
  lgreco_config lgreco{.alpha = 1.0, .period = 4, .window = 4};
  std::uint64_t seed = 0x5eed;  // PowerSGD's initial Q: the same on every worker
};

// module_codec: see the file comment. Move-only; decode is const and thread-safe.
class module_codec {
 public:
  // Requires: segs tile [0, n) in order (segments_of / whole_span).
  // Ensures: a codec for spec; every segment starts at the spec's default level.
  // Errors: invalid_argument for lgreco:powersgd (not supported by the trainers), segments that
  // do not tile the span, or invalid L-GreCo options.
  static result<module_codec> make(const compress_spec& spec, std::vector<segment> segs,
                                   const module_codec_options& o = {}) {
    std::size_t at = 0;
    for (auto& s : segs) {
      if (s.offset != at || s.size() == 0)
        return error(errc::invalid_argument, "module_codec: segments must tile the span in order");
      at += s.size();
    }
    module_codec c;
    c.spec_ = spec;
    c.segs_ = std::move(segs);
    c.n_ = at;
    c.layout_ = layout_hash(c.segs_);
    const lgreco_config* adapt = spec.lgreco ? &o.lgreco : nullptr;
    if (adapt)
      if (auto s = validate(o.lgreco); !s) return s.error();
    switch (spec.kind) {
      case codec_kind::identity:
        c.msg_ = std::make_unique<detail::message_of<identity>>(identity{}, c.segs_,
                                                                std::vector<int>{32}, nullptr);
        break;
      case codec_kind::bf16:
      case codec_kind::fp16:
        c.msg_ = std::make_unique<detail::message_of<cast>>(
            cast({spec.kind == codec_kind::bf16 ? half_format::bf16 : half_format::fp16}), c.segs_,
            std::vector<int>{16}, nullptr);
        break;
      case codec_kind::quantize:
        c.msg_ = std::make_unique<detail::message_of<quantize>>(
            quantize({.bits = spec.bits,
                      .scale = spec.minmax ? scale_mode::minmax : scale_mode::absmax}),
            c.segs_, lgreco_bits(), adapt);
        break;
      case codec_kind::topk:
        c.msg_ = std::make_unique<detail::message_of<topk>>(
            topk({.density = spec.density}), c.segs_, lgreco_densities(spec.density), adapt);
        break;
      case codec_kind::sign_prune:
        c.msg_ = std::make_unique<detail::message_of<sign_prune>>(
            sign_prune({.prune = spec.prune}), c.segs_, std::vector<double>{spec.prune}, nullptr);
        break;
      case codec_kind::powersgd:
        if (spec.lgreco)
          return error(errc::invalid_argument,
                       "compress = \"lgreco:powersgd:R\" is not supported by the trainers; use "
                       "powersgd:R, lgreco:int or lgreco:topk:D");
        c.rounds_ = std::make_unique<detail::rounds_model>(spec.rank, c.segs_, o.seed);
        break;
    }
    return result<module_codec>(std::move(c));  // spelled out: nvcc does not move implicitly here
  }

  const compress_spec& spec() const noexcept { return spec_; }
  // The canonical config string ("int8", "lgreco:int", "topk:0.01", "fp32", …).
  std::string name() const { return to_string(spec_); }
  std::size_t size() const noexcept { return n_; }
  const std::vector<segment>& segments() const noexcept { return segs_; }
  // Whether payloads are summed on the wire (fp32, bf16, fp16, PowerSGD) or all-gathered.
  wire_reduction reduction() const noexcept {
    switch (spec_.kind) {
      case codec_kind::identity:
      case codec_kind::bf16:
      case codec_kind::fp16:
      case codec_kind::powersgd: return wire_reduction::sum;
      default: return wire_reduction::gather;
    }
  }
  // Whether the sender keeps a residual (lossy codecs, unless "+noef").
  bool error_feedback() const noexcept {
    return spec_.error_feedback && spec_.kind != codec_kind::identity;
  }
  bool multi_round() const noexcept { return rounds_ != nullptr; }

  // ---- message: every codec but PowerSGD ----

  std::size_t header_bytes() const noexcept { return detail::message_header_bytes(segs_.size()); }
  // Ensures: >= the size of any payload a sender of this spec can produce (at any level).
  std::size_t max_payload_bytes() const {
    if (!msg_) return 0;
    return detail::message_bytes(*msg_, segs_, [&](std::size_t) { return msg_->widest(); });
  }
  // The level the next encode uses for segment s (L-GreCo changes it every F rounds).
  double level(std::size_t s) const { return msg_ ? msg_->level(s) : double(spec_.rank); }
  // L-GreCo adjustments made so far (0 without L-GreCo).
  std::size_t lgreco_solves() const { return msg_ ? msg_->solves() : 0; }
  // Ensures: the exact payload size of the next encode.
  std::size_t payload_bytes() const {
    if (!msg_) return 0;
    return detail::message_bytes(*msg_, segs_, [&](std::size_t s) { return msg_->level(s); });
  }

  // Encodes one round's Δ of this module into `out` (resized to payload_bytes(); capacity is
  // reused). With error feedback residual is the module's residual (size n, zero at the start)
  // and becomes Δ + e − decode(out); without it residual may be empty. L-GreCo observes Δ + e
  // before encoding and re-solves after it at the end of each period.
  // Errors: invalid_argument (multi-round codec, sizes), the codec's own.
  status encode(slice<const float> delta, slice<float> residual, std::vector<std::byte>& out) {
    if (!msg_)
      return {errc::invalid_argument, "module_codec: " + name() + " needs rounds, not a message"};
    if (auto s = check_sizes(delta, residual); !s) return s;
    return detail::encode_message(*msg_, frame(), delta,
                                  error_feedback() ? residual : slice<float>{}, out);
  }

  // Decodes a payload into y (size n). Errors, y then unspecified: corrupt for a truncated,
  // oversized or damaged payload (bad magic, checksum, level or body), version for another
  // payload version, mismatch for a payload of another codec or module layout.
  status decode(std::span<const std::byte> in, slice<float> y) const {
    if (!msg_)
      return {errc::invalid_argument, "module_codec: " + name() + " payloads are not messages"};
    if (y.size() != n_)
      return {errc::invalid_argument, "module_codec: output of " + std::to_string(y.size()) +
                                          " elements for a module of " + std::to_string(n_)};
    return detail::decode_message(*msg_, frame(), in, y);
  }

  // ---- summed: fp32, bf16, fp16 (no header: every worker's array is added element-wise) ----

  // Bytes of a summed payload (4n for fp32, 2n for bf16/fp16); 0 for the other codecs.
  std::size_t summed_bytes() const {
    if (!msg_ || reduction() != wire_reduction::sum) return 0;
    return detail::summed_bytes(*msg_, n_);
  }
  // out = the bare element array of Δ (+ e with error feedback). Requires: out.size() ==
  // summed_bytes().
  status encode_summed(slice<const float> delta, slice<float> residual, std::span<std::byte> out) {
    if (summed_bytes() == 0)
      return {errc::invalid_argument, "module_codec: " + name() + " payloads are not summed"};
    if (auto s = check_sizes(delta, residual); !s) return s;
    return detail::encode_summed(*msg_, delta, error_feedback() ? residual : slice<float>{}, out);
  }
  // y = decode(sum) / world. Requires: sum is the element-wise sum of `world` summed payloads.
  status decode_summed(std::span<const std::byte> sum, std::size_t world, slice<float> y) const {
    if (summed_bytes() == 0)
      return {errc::invalid_argument, "module_codec: " + name() + " payloads are not summed"};
    return detail::decode_summed(*msg_, sum, world, n_, y);
  }

  // ---- rounds: PowerSGD (each round's floats summed over the workers) ----

  int rounds() const noexcept { return rounds_ ? powersgd::rounds : 1; }
  // Floats of round k's payload (round 0 also carries the uncompressed vectors).
  std::size_t round_floats(int k) const { return rounds_ ? rounds_->round_floats(k) : 0; }
  // Matrix segments PowerSGD compresses (the rest ride uncompressed in round 0).
  std::size_t compressed_segments() const { return rounds_ ? rounds_->compressed() : 0; }
  // Round k's payload; prev_sum is round k−1's sum over workers (empty for k = 0). With error
  // feedback, round 0 turns residual into Δ + e (M), decode_rounds subtracts the reconstruction.
  status encode_round(int k, slice<const float> delta, slice<float> residual,
                      slice<const float> prev_sum, slice<float> out) {
    if (!rounds_) return {errc::invalid_argument, "module_codec: " + name() + " has no rounds"};
    if (k != 0 && k != 1)
      return {errc::invalid_argument,
              "module_codec: round " + std::to_string(k) + ", accepted 0 or 1"};
    if (auto s = check_sizes(delta, residual); !s) return s;
    return rounds_->encode_round(k, delta, error_feedback() ? residual : slice<float>{}, prev_sum,
                                 out);
  }
  // y = the mean reconstruction from the last round's sum; residual ← M − y (error feedback).
  status decode_rounds(slice<const float> last_sum, std::size_t world, slice<float> y,
                       slice<float> residual) {
    if (!rounds_) return {errc::invalid_argument, "module_codec: " + name() + " has no rounds"};
    if (y.size() != n_) return {errc::invalid_argument, "module_codec: output size differs"};
    if (auto s = check_sizes(y, residual); !s) return s;
    return rounds_->decode(last_sum, world, y, error_feedback() ? residual : slice<float>{});
  }

 private:
  module_codec() = default;
  detail::message_frame frame() const { return {spec_, segs_, n_, layout_}; }
  status check_sizes(slice<const float> delta, slice<const float> residual) const {
    if (delta.size() != n_)
      return {errc::invalid_argument, "module_codec: Δ of " + std::to_string(delta.size()) +
                                          " elements for a module of " + std::to_string(n_)};
    if (error_feedback() && residual.size() != n_)
      return {errc::invalid_argument,
              "module_codec: " + name() + " keeps a residual of the module's size (" +
                  std::to_string(n_) + "), got " + std::to_string(residual.size())};
    return {};
  }

  compress_spec spec_{};
  std::vector<segment> segs_;
  std::size_t n_ = 0;
  std::uint64_t layout_ = 0;
  std::unique_ptr<detail::message_model> msg_;
  std::unique_ptr<detail::rounds_model> rounds_;
};

}  // namespace paco::compress
