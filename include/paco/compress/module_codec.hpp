#pragma once
// module_codec: the runtime codec of one module's pseudo-gradient, built from a compress_spec
// (a trainer's `compress = "int8"`) and the module's segment table (segments.hpp). It hides
// which codec runs behind one type, keeps the sender's state (codec scratch, L-GreCo's
// accumulators and levels) and leaves the error-feedback residual with the caller (the worker's
// arena, plane::residual), so a worker holds one module_codec per module it pushes and a store
// one per module it decodes.
//
// Three ways to move a module's Δ, by codec (docs/compression.md):
//   message  every codec but PowerSGD: one self-checking payload (below) per worker; a store
//            decodes it, an all-reduce DiLoCo all-gathers the payloads and decodes each.
//   summed   fp32, bf16, fp16 on an all-reduce: the bare element array, added on the wire.
//   rounds   PowerSGD: two float rounds, each summed over the workers before the next.
//
// Payload of a message (little-endian):
//   payload_header   40 bytes: magic "PCZ1", version, codec, flags, S, n, layout, check
//   levels           f64[S]: each segment's level (bits, density, pruned fraction; 32 / 16)
//   bodies           segment s's codec payload, wire_bytes(size_s, level_s) bytes, in order
// The header names the levels, so an L-GreCo sender changes them every F rounds and any receiver
// built from the same spec decodes them. `check` is hash64 of everything after the header.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "paco/compress/cast.hpp"
#include "paco/compress/error_feedback.hpp"
#include "paco/compress/identity.hpp"
#include "paco/compress/lgreco.hpp"
#include "paco/compress/powersgd.hpp"
#include "paco/compress/quantize.hpp"
#include "paco/compress/segments.hpp"
#include "paco/compress/sign_prune.hpp"
#include "paco/compress/spec.hpp"
#include "paco/compress/topk.hpp"

namespace paco::compress {

#pragma pack(push, 1)
struct payload_header {
  std::uint32_t magic;     // payload_magic
  std::uint16_t version;   // payload_version
  std::uint8_t codec;      // codec_kind
  std::uint8_t flags;      // bit 0: the sender applied error feedback
  std::uint32_t segments;  // S
  std::uint32_t reserved;  // 0
  std::uint64_t elements;  // n: elements of the module span
  std::uint64_t layout;    // layout_hash of the segment table
  std::uint64_t check;     // hash64 of the levels and bodies
};
#pragma pack(pop)
static_assert(sizeof(payload_header) == 40, "payload_header is packed");
inline constexpr std::uint32_t payload_magic = 0x315A4350u;  // "PCZ1"
inline constexpr std::uint16_t payload_version = 1;

struct module_codec_options {
  // L-GreCo (lgreco:int, lgreco:topk:D): levels re-chosen every `period` rounds (F) from the
  // pseudo-gradients of the last `window` rounds (A <= F), budget α·Σ e(default level).
  lgreco_config lgreco{.alpha = 1.0, .period = 4, .window = 4};
  std::uint64_t seed = 0x5eed;  // PowerSGD's initial Q: the same on every worker
};

namespace detail {

// The levels a codec's payload may name, and the one with the largest payload (it bounds what a
// receiver accepts).
template <class C>
struct level_set;
template <>
struct level_set<identity> {
  static bool ok(double l) { return l == 32; }
  static constexpr double widest = 32;
};
template <>
struct level_set<cast> {
  static bool ok(double l) { return l == 16; }
  static constexpr double widest = 16;
};
template <>
struct level_set<quantize> {
  static bool ok(double l) { return l >= 2 && l <= 8 && l == std::floor(l); }
  static constexpr double widest = 8;
};
template <>
struct level_set<topk> {
  static bool ok(double l) { return l > 0 && l <= 1; }
  static constexpr double widest = 1;
};
template <>
struct level_set<sign_prune> {
  static bool ok(double l) { return l >= 0 && l < 1; }
  static constexpr double widest = 0;
};

// The sender's and receiver's side of one single-message codec over a segment table.
class message_model {
 public:
  virtual ~message_model() = default;
  virtual bool level_ok(double l) const = 0;
  virtual std::size_t body_bytes(std::size_t n, double l) const = 0;
  virtual double widest() const = 0;
  virtual double level(std::size_t s) const = 0;
  virtual std::size_t solves() const = 0;
  // L-GreCo: accumulate g + e of segment s (before encode); end_round re-solves every F rounds.
  virtual status observe(std::size_t s, slice<const float> g, slice<const float> residual) = 0;
  virtual status end_round() = 0;
  // out = encode(g + e); e ← g + e − decode(out) (residual empty: no error feedback).
  virtual status encode(slice<const float> g, slice<float> residual, double l,
                        slice<std::byte> out) = 0;
  virtual status decode(slice<const std::byte> in, double l, slice<float> y) const = 0;
};

template <Compressor C>
class message_of final : public message_model {
 public:
  using level_type = typename C::level_type;

  message_of(C c, const std::vector<segment>& segs, std::vector<level_type> candidates,
             const lgreco_config* adapt)
      : ef_(std::move(c)), default_(ef_.inner().default_level()) {
    if (adapt) {
      std::vector<matrix_shape> shapes;
      for (auto& s : segs) shapes.push_back(s.shape);
      ctl_ = std::make_unique<lgreco<C>>(ef_.inner(), *adapt, std::move(shapes),
                                         std::move(candidates), default_);
    }
  }
  bool level_ok(double l) const override { return level_set<C>::ok(l); }
  std::size_t body_bytes(std::size_t n, double l) const override {
    return ef_.wire_bytes(n, static_cast<level_type>(l));
  }
  double widest() const override { return level_set<C>::widest; }
  double level(std::size_t s) const override {
    return static_cast<double>(ctl_ ? ctl_->level(s) : default_);
  }
  std::size_t solves() const override { return solves_; }
  status observe(std::size_t s, slice<const float> g, slice<const float> residual) override {
    if (!ctl_) return {};
    return residual.empty() ? ctl_->observe(s, g) : ctl_->observe(s, g, residual);
  }
  status end_round() override {
    if (!ctl_) return {};
    auto r = ctl_->end_round();
    if (!r) return r.error();
    solves_ += *r ? 1 : 0;
    return {};
  }
  status encode(slice<const float> g, slice<float> residual, double l,
                slice<std::byte> out) override {
    const auto lv = static_cast<level_type>(l);
    if (residual.empty()) return ef_.inner().encode(g, lv, out);
    return ef_.encode(g, residual, lv, out);
  }
  status decode(slice<const std::byte> in, double l, slice<float> y) const override {
    return ef_.decode(in, static_cast<level_type>(l), y);
  }

 private:
  error_feedback<C> ef_;
  level_type default_;
  std::unique_ptr<lgreco<C>> ctl_;
  std::size_t solves_ = 0;
};

// PowerSGD over the matrix segments; vectors and matrices it cannot shrink ride uncompressed
// (summed) in round 0, as the PyTorch hook all-reduces them in one batch.
class rounds_model {
 public:
  rounds_model(int rank, const std::vector<segment>& segs, std::uint64_t seed) : segs_(segs) {
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      const auto sh = segs_[s].shape;
      const std::size_t r = static_cast<std::size_t>(rank);
      const bool fits = segs_[s].is_matrix() && r <= std::min(sh.rows, sh.cols) &&
                        (sh.rows + sh.cols) * r < sh.rows * sh.cols;
      part p;
      p.segment = s;
      if (fits) {
        p.codec = std::make_unique<powersgd>(powersgd_config{.rank = rank, .seed = seed + s});
        p.state = std::make_unique<powersgd_state>();
        if (auto st = p.codec->init(*p.state, sh, rank); !st) p.codec.reset();
      }
      if (p.codec) {
        p.off0 = round0_;
        round0_ += sh.rows * r;
        p.off1 = round1_;
        round1_ += sh.cols * r;
      } else {
        p.off0 = round0_;
        round0_ += sh.size();
      }
      parts_.push_back(std::move(p));
    }
    vec_sum_.resize(round0_);
  }

  std::size_t round_floats(int k) const { return k == 0 ? round0_ : round1_; }
  std::size_t compressed() const {
    std::size_t c = 0;
    for (auto& p : parts_) c += p.codec ? 1 : 0;
    return c;
  }

  status encode_round(int k, slice<const float> g, slice<float> residual, slice<const float> prev,
                      slice<float> out) {
    if (out.size() != round_floats(k))
      return {errc::invalid_argument, "powersgd: round " + std::to_string(k) + " output of " +
                                          std::to_string(out.size()) + " floats, expected " +
                                          std::to_string(round_floats(k))};
    if (k == 1 && prev.size() != round0_)
      return {errc::invalid_argument, "powersgd: round 1 needs round 0's sum"};
    for (auto& p : parts_) {
      const auto& sg = segs_[p.segment];
      slice<const float> gs = g.sub(sg.offset, sg.size());
      if (!p.codec) {
        if (k == 0)
          std::memcpy(out.data() + p.off0, gs.data(), gs.size_bytes());
        else
          std::memcpy(vec_sum_.data() + p.off0, prev.data() + p.off0, gs.size_bytes());
        continue;
      }
      slice<const float> m = gs;
      if (!residual.empty()) {  // M = g + e, kept in the residual until decode
        slice<float> rs = residual.sub(sg.offset, sg.size());
        if (k == 0) ef_accumulate(gs, rs);
        m = rs;
      }
      const std::size_t r = static_cast<std::size_t>(p.state->rank);
      if (k == 0) {
        slice<std::byte> o{reinterpret_cast<std::byte*>(out.data() + p.off0),
                           sg.shape.rows * r * sizeof(float)};
        if (auto s = p.codec->encode_round(*p.state, 0, m, {}, o); !s) return s;
      } else {
        slice<const std::byte> in{reinterpret_cast<const std::byte*>(prev.data() + p.off0),
                                  sg.shape.rows * r * sizeof(float)};
        slice<std::byte> o{reinterpret_cast<std::byte*>(out.data() + p.off1),
                           sg.shape.cols * r * sizeof(float)};
        if (auto s = p.codec->encode_round(*p.state, 1, m, in, o); !s) return s;
      }
    }
    return {};
  }

  status decode(slice<const float> last, std::size_t world, slice<float> y, slice<float> residual) {
    if (last.size() != round1_)
      return {errc::invalid_argument, "powersgd: decode needs round 1's sum"};
    if (world < 1) return {errc::invalid_argument, "powersgd: world = 0, accepted >= 1"};
    const float inv = 1.0f / static_cast<float>(world);
    for (auto& p : parts_) {
      const auto& sg = segs_[p.segment];
      slice<float> ys = y.sub(sg.offset, sg.size());
      if (!p.codec) {
        for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = vec_sum_[p.off0 + i] * inv;
        continue;
      }
      const std::size_t r = static_cast<std::size_t>(p.state->rank);
      slice<const std::byte> in{reinterpret_cast<const std::byte*>(last.data() + p.off1),
                                sg.shape.cols * r * sizeof(float)};
      if (auto s = p.codec->decode(*p.state, in, world, ys); !s) return s;
      if (!residual.empty()) ef_subtract(residual.sub(sg.offset, sg.size()), ys);
    }
    return {};
  }

 private:
  struct part {
    std::size_t segment = 0, off0 = 0, off1 = 0;
    std::unique_ptr<powersgd> codec;  // null: sent uncompressed in round 0
    std::unique_ptr<powersgd_state> state;
  };
  std::vector<segment> segs_;
  std::vector<part> parts_;
  std::size_t round0_ = 0, round1_ = 0;
  std::vector<float> vec_sum_;  // round 0's sum of the uncompressed parts
};

}  // namespace detail

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
        c.msg_ = std::make_unique<detail::message_of<quantize>>(quantize({.bits = spec.bits}),
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
    return c;
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
      case codec_kind::powersgd:
        return wire_reduction::sum;
      default:
        return wire_reduction::gather;
    }
  }
  // Whether the sender keeps a residual (lossy codecs, unless "+noef").
  bool error_feedback() const noexcept {
    return spec_.error_feedback && spec_.kind != codec_kind::identity;
  }
  bool multi_round() const noexcept { return rounds_ != nullptr; }

  // ---- message: every codec but PowerSGD ----

  std::size_t header_bytes() const noexcept { return sizeof(payload_header) + 8 * segs_.size(); }
  // Ensures: >= the size of any payload a sender of this spec can produce (at any level).
  std::size_t max_payload_bytes() const {
    if (!msg_) return 0;
    std::size_t b = header_bytes();
    for (auto& s : segs_) b += msg_->body_bytes(s.size(), msg_->widest());
    return b;
  }
  // The level the next encode uses for segment s (L-GreCo changes it every F rounds).
  double level(std::size_t s) const { return msg_ ? msg_->level(s) : double(spec_.rank); }
  // L-GreCo adjustments made so far (0 without L-GreCo).
  std::size_t lgreco_solves() const { return msg_ ? msg_->solves() : 0; }
  // Ensures: the exact payload size of the next encode.
  std::size_t payload_bytes() const {
    if (!msg_) return 0;
    std::size_t b = header_bytes();
    for (std::size_t s = 0; s < segs_.size(); ++s)
      b += msg_->body_bytes(segs_[s].size(), msg_->level(s));
    return b;
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
    const slice<float> res = error_feedback() ? residual : slice<float>{};
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      const auto& sg = segs_[s];
      auto st = msg_->observe(
          s, delta.sub(sg.offset, sg.size()),
          res.empty() ? slice<const float>{} : slice<const float>(res.sub(sg.offset, sg.size())));
      if (!st) return st;
    }
    out.resize(payload_bytes());
    std::byte* p = out.data() + sizeof(payload_header);
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      const double l = msg_->level(s);
      std::memcpy(p, &l, 8);
      p += 8;
    }
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      const auto& sg = segs_[s];
      const double l = msg_->level(s);
      const std::size_t b = msg_->body_bytes(sg.size(), l);
      auto st = msg_->encode(delta.sub(sg.offset, sg.size()),
                             res.empty() ? res : res.sub(sg.offset, sg.size()), l,
                             slice<std::byte>(p, b));
      if (!st) return st;
      p += b;
    }
    payload_header h{payload_magic,
                     payload_version,
                     static_cast<std::uint8_t>(spec_.kind),
                     static_cast<std::uint8_t>(res.empty() ? 0 : 1),
                     static_cast<std::uint32_t>(segs_.size()),
                     0,
                     n_,
                     layout_,
                     0};
    h.check = hash64(out.data() + sizeof h, out.size() - sizeof h);
    std::memcpy(out.data(), &h, sizeof h);
    return msg_->end_round();
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
    payload_header h;
    if (in.size() < sizeof h)
      return {errc::corrupt, "compressed payload of " + std::to_string(in.size()) +
                                 " bytes is shorter than its header"};
    std::memcpy(&h, in.data(), sizeof h);
    if (h.magic != payload_magic) return {errc::corrupt, "not a compressed payload (bad magic)"};
    if (h.version != payload_version)
      return {errc::version, "compressed payload version " + std::to_string(h.version) +
                                 ", this build reads " + std::to_string(payload_version)};
    if (h.codec != static_cast<std::uint8_t>(spec_.kind))
      return {errc::mismatch, "payload of codec " +
                                  std::string(h.codec <= 6 ? to_string(codec_kind(h.codec)) : "?") +
                                  ", this receiver decodes " + name()};
    if (h.elements != n_ || h.segments != segs_.size() || h.layout != layout_)
      return {errc::mismatch, "payload for a module of " + std::to_string(h.elements) +
                                  " elements in " + std::to_string(h.segments) +
                                  " segments; this module has " + std::to_string(n_) + " in " +
                                  std::to_string(segs_.size()) + " (or another layout)"};
    if (in.size() < header_bytes())
      return {errc::corrupt, "compressed payload truncated inside its level table"};
    if (hash64(in.data() + sizeof h, in.size() - sizeof h) != h.check)
      return {errc::corrupt, "compressed payload failed its checksum"};
    std::size_t need = header_bytes();
    std::vector<double> levels(segs_.size());
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      std::memcpy(&levels[s], in.data() + sizeof h + 8 * s, 8);
      if (!std::isfinite(levels[s]) || !msg_->level_ok(levels[s]))
        return {errc::corrupt,
                "compressed payload names an invalid level for segment " + std::to_string(s)};
      need += msg_->body_bytes(segs_[s].size(), levels[s]);
    }
    if (in.size() != need)
      return {errc::corrupt, "compressed payload is " + std::to_string(in.size()) +
                                 " bytes, its levels need " + std::to_string(need) +
                                 (in.size() < need ? " (truncated)" : " (oversized)")};
    const std::byte* p = in.data() + header_bytes();
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      const auto& sg = segs_[s];
      const std::size_t b = msg_->body_bytes(sg.size(), levels[s]);
      if (auto st = msg_->decode({p, b}, levels[s], y.sub(sg.offset, sg.size())); !st) return st;
      p += b;
    }
    return {};
  }

  // ---- summed: fp32, bf16, fp16 (no header: every worker's array is added element-wise) ----

  // Bytes of a summed payload (4n for fp32, 2n for bf16/fp16); 0 for the other codecs.
  std::size_t summed_bytes() const {
    if (!msg_ || reduction() != wire_reduction::sum) return 0;
    return msg_->body_bytes(n_, msg_->level(0));
  }
  // out = the bare element array of Δ (+ e with error feedback). Requires: out.size() ==
  // summed_bytes().
  status encode_summed(slice<const float> delta, slice<float> residual, std::span<std::byte> out) {
    if (summed_bytes() == 0)
      return {errc::invalid_argument, "module_codec: " + name() + " payloads are not summed"};
    if (auto s = check_sizes(delta, residual); !s) return s;
    return msg_->encode(delta, error_feedback() ? residual : slice<float>{}, msg_->level(0), out);
  }
  // y = decode(sum) / world. Requires: sum is the element-wise sum of `world` summed payloads.
  status decode_summed(std::span<const std::byte> sum, std::size_t world, slice<float> y) const {
    if (summed_bytes() == 0)
      return {errc::invalid_argument, "module_codec: " + name() + " payloads are not summed"};
    if (world < 1) return {errc::invalid_argument, "module_codec: world = 0, accepted >= 1"};
    if (y.size() != n_) return {errc::invalid_argument, "module_codec: output size differs"};
    if (auto s = msg_->decode(sum, msg_->level(0), y); !s) return s;
    const float inv = 1.0f / static_cast<float>(world);
    for (auto& v : y.span()) v *= inv;
    return {};
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
