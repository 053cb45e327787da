#pragma once
// The message protocol of module_codec (every codec but PowerSGD): each worker sends one
// self-checking payload for its module's Δ; a store decodes it, an all-reduce DiLoCo all-gathers
// the payloads and decodes each.
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
#include <span>
#include <string>
#include <vector>

#include "paco/compress/detail/codec_model.hpp"
#include "paco/compress/segments.hpp"
#include "paco/compress/spec.hpp"
#include "paco/core/hash.hpp"

namespace paco::compress {

// The first 40 bytes of a message payload, packed little-endian (see the file comment).
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

namespace detail {

// The module a message belongs to, as its module_codec knows it: codec spec, segment table (tiling
// [0, n) in order), element count and layout_hash of the table.
struct message_frame {
  compress_spec spec;
  std::span<const segment> segs;
  std::size_t n;
  std::uint64_t layout;
};

// Bytes of the header and level table of a message over S segments.
inline std::size_t message_header_bytes(std::size_t segments) {
  return sizeof(payload_header) + 8 * segments;
}

// Ensures: the size of a message whose segment s is at level level_of(s).
template <class LevelOf>
std::size_t message_bytes(const message_model& m, std::span<const segment> segs, LevelOf level_of) {
  std::size_t b = message_header_bytes(segs.size());
  for (std::size_t s = 0; s < segs.size(); ++s) b += m.body_bytes(segs[s].size(), level_of(s));
  return b;
}

// out = the message of Δ (resized to its size; capacity reused), each segment at the model's
// current level. With a residual (error feedback; empty: none) the model observes Δ + e per
// segment first (L-GreCo), the residual becomes Δ + e − decode(out), and the model ends its round.
// Requires: delta.size() == f.n; residual empty or of size f.n.
inline status encode_message(message_model& m, const message_frame& f, slice<const float> delta,
                             slice<float> residual, std::vector<std::byte>& out) {
  for (std::size_t s = 0; s < f.segs.size(); ++s) {
    const auto& sg = f.segs[s];
    auto st = m.observe(s, delta.sub(sg.offset, sg.size()),
                        residual.empty() ? slice<const float>{}
                                         : slice<const float>(residual.sub(sg.offset, sg.size())));
    if (!st) return st;
  }
  out.resize(message_bytes(m, f.segs, [&](std::size_t s) { return m.level(s); }));
  std::byte* p = out.data() + sizeof(payload_header);
  for (std::size_t s = 0; s < f.segs.size(); ++s) {
    const double l = m.level(s);
    std::memcpy(p, &l, 8);
    p += 8;
  }
  for (std::size_t s = 0; s < f.segs.size(); ++s) {
    const auto& sg = f.segs[s];
    const double l = m.level(s);
    const std::size_t b = m.body_bytes(sg.size(), l);
    auto st = m.encode(delta.sub(sg.offset, sg.size()),
                       residual.empty() ? residual : residual.sub(sg.offset, sg.size()), l,
                       slice<std::byte>(p, b));
    if (!st) return st;
    p += b;
  }
  payload_header h{payload_magic,
                   payload_version,
                   static_cast<std::uint8_t>(f.spec.kind),
                   static_cast<std::uint8_t>(residual.empty() ? 0 : 1),
                   static_cast<std::uint32_t>(f.segs.size()),
                   0,
                   f.n,
                   f.layout,
                   0};
  h.check = hash64(out.data() + sizeof h, out.size() - sizeof h);
  std::memcpy(out.data(), &h, sizeof h);
  return m.end_round();
}

// Decodes a message into y (size f.n). Errors, y then unspecified: corrupt for a truncated,
// oversized or damaged payload (bad magic, checksum, level or body), version for another payload
// version, mismatch for a payload of another codec or module layout.
inline status decode_message(const message_model& m, const message_frame& f,
                             std::span<const std::byte> in, slice<float> y) {
  payload_header h;
  if (in.size() < sizeof h)
    return {errc::corrupt, "compressed payload of " + std::to_string(in.size()) +
                               " bytes is shorter than its header"};
  std::memcpy(&h, in.data(), sizeof h);
  if (h.magic != payload_magic) return {errc::corrupt, "not a compressed payload (bad magic)"};
  if (h.version != payload_version)
    return {errc::version, "compressed payload version " + std::to_string(h.version) +
                               ", this build reads " + std::to_string(payload_version)};
  if (h.codec != static_cast<std::uint8_t>(f.spec.kind))
    return {errc::mismatch, "payload of codec " +
                                std::string(h.codec <= 6 ? to_string(codec_kind(h.codec)) : "?") +
                                ", this receiver decodes " + to_string(f.spec)};
  if (h.elements != f.n || h.segments != f.segs.size() || h.layout != f.layout)
    return {errc::mismatch, "payload for a module of " + std::to_string(h.elements) +
                                " elements in " + std::to_string(h.segments) +
                                " segments; this module has " + std::to_string(f.n) + " in " +
                                std::to_string(f.segs.size()) + " (or another layout)"};
  const std::size_t head = message_header_bytes(f.segs.size());
  if (in.size() < head)
    return {errc::corrupt, "compressed payload truncated inside its level table"};
  if (hash64(in.data() + sizeof h, in.size() - sizeof h) != h.check)
    return {errc::corrupt, "compressed payload failed its checksum"};
  std::vector<double> levels(f.segs.size());
  for (std::size_t s = 0; s < f.segs.size(); ++s) {
    std::memcpy(&levels[s], in.data() + sizeof h + 8 * s, 8);
    if (!std::isfinite(levels[s]) || !m.level_ok(levels[s]))
      return {errc::corrupt,
              "compressed payload names an invalid level for segment " + std::to_string(s)};
  }
  const std::size_t need = message_bytes(m, f.segs, [&](std::size_t s) { return levels[s]; });
  if (in.size() != need)
    return {errc::corrupt, "compressed payload is " + std::to_string(in.size()) +
                               " bytes, its levels need " + std::to_string(need) +
                               (in.size() < need ? " (truncated)" : " (oversized)")};
  const std::byte* p = in.data() + head;
  for (std::size_t s = 0; s < f.segs.size(); ++s) {
    const auto& sg = f.segs[s];
    const std::size_t b = m.body_bytes(sg.size(), levels[s]);
    if (auto st = m.decode({p, b}, levels[s], y.sub(sg.offset, sg.size())); !st) return st;
    p += b;
  }
  return {};
}

}  // namespace detail

}  // namespace paco::compress
