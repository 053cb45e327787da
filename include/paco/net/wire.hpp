#pragma once
// wire: the byte format of paco's TCP transport. Every frame is a 32-byte header followed by
// `length` payload bytes. The header carries magic, version, kind, tag, length, the CRC-32C of
// the payload and the CRC-32C of the header itself. Integers are little-endian (the structs are
// packed and sent as they lie in memory; paco supports little-endian hosts only).
//
// Handshake (in TLS too): client -> hello(nonce_c); server -> hello(nonce_s, mac_s); client ->
// auth(mac_c); server -> welcome | refuse(errc). mac_s = HMAC(token, "paco-s" ++ hello_c ++
// hello_s with zero mac), mac_c = HMAC(token, "paco-c" ++ hello_c ++ hello_s). A peer without
// the token cannot produce either mac and is refused with errc::auth. The macs are
// net/detail/handshake_mac.hpp's (OpenSSL's HMAC-SHA-256).
//
// Decoding never trusts a length before the header checksum passed and never allocates more
// than the configured bound: each malformed input maps to one specific paco::errc:
//   bad magic / unknown kind / control frame of the wrong size  -> errc::protocol
//   other version                                               -> errc::version
//   header or payload checksum                                  -> errc::corrupt
//   length above the bound                                      -> errc::too_large
//   wrong token                                                 -> errc::auth
//   input ends inside a frame                                   -> errc::protocol (truncated)

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string_view>
#include <system_error>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/crc32c.hpp"

namespace paco::net::wire {

static_assert(std::endian::native == std::endian::little,
              "paco's wire format assumes little-endian");

inline constexpr std::uint32_t magic = 0x4f434150u;  // "PACO" in memory order
inline constexpr std::uint16_t version = 1;

enum class kind : std::uint8_t {
  data = 1,       // a tagged message
  heartbeat = 2,  // liveness, no payload
  hello = 3,      // handshake: hello_body
  auth = 4,       // handshake: auth_body
  welcome = 5,    // handshake accepted
  refuse = 6,     // refused; header.aux = paco::errc, payload: empty or a reason (text)
  table = 7,      // coordinator -> rank: table_entry[size]
  bye = 8,        // orderly close
};
inline constexpr std::uint8_t max_kind = 8;

inline constexpr std::uint8_t flag_payload_crc = 1;  // payload_crc is valid

#pragma pack(push, 1)
// The header of every frame. Requires: header_crc = crc32c over the first 28 bytes.
struct frame_header {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint8_t kind;
  std::uint8_t flags;
  std::uint32_t tag;
  std::uint32_t aux;  // kind-specific (refuse: errc); 0 otherwise
  std::uint64_t length;
  std::uint32_t payload_crc;
  std::uint32_t header_crc;
};
// Handshake greeting (both directions). `mac` is zero in the client's hello.
struct hello_body {
  std::uint32_t rank;
  std::uint32_t size;
  std::uint64_t epoch;        // group generation: ranks of different groups never connect
  std::uint16_t listen_port;  // where this rank accepts peers (coordinator rendezvous)
  std::uint16_t stream;       // which of the link's streams this connection is (0 .. streams-1)
  std::uint32_t streams;      // TCP streams per link in this group (0, from older peers: 1)
  std::uint8_t nonce[32];
  std::uint8_t mac[32];
};
struct auth_body {
  std::uint8_t mac[32];
};
// One row of the coordinator's table: where rank i listens.
struct table_entry {
  std::uint32_t ipv4;  // host byte order
  std::uint16_t port;
  std::uint16_t reserved;
};
#pragma pack(pop)
static_assert(sizeof(frame_header) == 32);
static_assert(sizeof(hello_body) == 88);
static_assert(sizeof(auth_body) == 32);
static_assert(sizeof(table_entry) == 8);
static_assert(std::is_trivially_copyable_v<frame_header>);

inline constexpr std::size_t header_bytes = sizeof(frame_header);
inline constexpr std::size_t header_crc_bytes = header_bytes - 4;

// A header for a frame of `k` with payload `payload`. Ensures: decode_header accepts it.
// Cost: one CRC pass over payload when `checksum` (the default).
inline frame_header make_header(kind k, std::uint32_t tag, std::span<const std::byte> payload,
                                bool checksum = true, std::uint32_t aux = 0) noexcept {
  frame_header h{};
  h.magic = magic;
  h.version = version;
  h.kind = static_cast<std::uint8_t>(k);
  h.flags = checksum ? flag_payload_crc : 0;
  h.tag = tag;
  h.aux = aux;
  h.length = payload.size();
  h.payload_crc = checksum ? crc32c(0, payload) : 0;
  h.header_crc = crc32c(0, std::as_bytes(std::span(&h, 1)).first(header_crc_bytes));
  return h;
}

// A data-frame header for a payload of `length` bytes whose CRC-32C the caller already knows
// (a verified received frame forwarded unchanged). Requires: crc == crc32c(0, payload).
// Ensures: the same header make_header(kind::data, tag, payload) gives; no pass over the payload.
inline frame_header make_data_header_with_crc(std::uint32_t tag, std::uint64_t length,
                                              std::uint32_t crc) noexcept {
  frame_header h{};
  h.magic = magic;
  h.version = version;
  h.kind = static_cast<std::uint8_t>(kind::data);
  h.flags = flag_payload_crc;
  h.tag = tag;
  h.length = length;
  h.payload_crc = crc;
  h.header_crc = crc32c(0, std::as_bytes(std::span(&h, 1)).first(header_crc_bytes));
  return h;
}

// Limits a decoder enforces.
struct limits {
  std::uint64_t max_payload = std::uint64_t(1) << 30;  // bytes of one data frame
};

// The longest reason a refuse frame carries (bytes of text). Only a coordinator's refusal of a
// whole group carries one (tcp_connect.hpp: stop_group, read by join()); handshake refusals are
// empty.
inline constexpr std::size_t max_refuse_reason = 1024;

// The payload size a control frame must have, or -1 for variable (data, table, refuse).
inline std::int64_t control_payload_bytes(kind k) noexcept {
  switch (k) {
    case kind::heartbeat:
    case kind::welcome:
    case kind::bye: return 0;
    case kind::hello: return sizeof(hello_body);
    case kind::auth: return sizeof(auth_body);
    default: return -1;
  }
}

// Checks a received header. Ensures: on {} the header's magic, version, crc, kind and length
// are valid and length <= lim.max_payload; otherwise the specific errc (see file comment).
inline std::error_code check_header(const frame_header& h, const limits& lim) noexcept {
  if (h.magic != magic) return errc::protocol;
  if (h.version != version) return errc::version;
  auto bytes = std::as_bytes(std::span(&h, 1)).first(header_crc_bytes);
  if (crc32c(0, bytes) != h.header_crc) return errc::corrupt;
  if (h.kind == 0 || h.kind > max_kind) return errc::protocol;
  if (h.flags & ~flag_payload_crc) return errc::protocol;
  auto fixed = control_payload_bytes(static_cast<kind>(h.kind));
  if (fixed >= 0 && h.length != static_cast<std::uint64_t>(fixed)) return errc::protocol;
  if (h.kind == static_cast<std::uint8_t>(kind::refuse) && h.length > max_refuse_reason)
    return errc::protocol;
  if (h.length > lim.max_payload) return errc::too_large;
  return {};
}

// Decodes the header at the start of `bytes`. Requires: bytes.size() >= header_bytes.
inline std::error_code decode_header(std::span<const std::byte> bytes, const limits& lim,
                                     frame_header& out) noexcept {
  if (bytes.size() < header_bytes) return errc::protocol;
  std::memcpy(&out, bytes.data(), header_bytes);
  return check_header(out, lim);
}

// Checks a payload against its (already checked) header. Ensures: {} or errc::corrupt.
inline std::error_code check_payload(const frame_header& h, std::span<const std::byte> p) noexcept {
  if (p.size() != h.length) return errc::protocol;
  if ((h.flags & flag_payload_crc) && crc32c(0, p) != h.payload_crc) return errc::corrupt;
  return {};
}

// An incremental decoder of a byte stream into frames (used by the fuzz target and by tools
// that read recorded streams). Memory held: at most one payload of <= lim.max_payload bytes.
class frame_reader {
 public:
  explicit frame_reader(limits lim = {}) : lim_(lim) {}

  // Feeds bytes; calls on_frame(header, payload) for every complete frame. Returns the first
  // error (the reader then stays failed). Ensures: never holds more than max_payload bytes.
  template <class F>
  std::error_code feed(std::span<const std::byte> in, F&& on_frame) {
    if (err_) return err_;
    while (!in.empty()) {
      if (hfill_ < header_bytes) {
        std::size_t k = std::min(in.size(), header_bytes - hfill_);
        std::memcpy(hbuf_ + hfill_, in.data(), k);
        hfill_ += k;
        in = in.subspan(k);
        if (hfill_ < header_bytes) break;
        if ((err_ = decode_header(std::as_bytes(std::span(hbuf_)), lim_, h_))) return err_;
        payload_.clear();
        payload_.reserve(h_.length);
      }
      std::size_t k = std::min<std::size_t>(in.size(), h_.length - payload_.size());
      payload_.insert(payload_.end(), in.begin(), in.begin() + k);
      in = in.subspan(k);
      if (payload_.size() == h_.length) {
        if ((err_ = check_payload(h_, payload_))) return err_;
        on_frame(static_cast<const frame_header&>(h_), std::span<const std::byte>(payload_));
        hfill_ = 0;
      }
    }
    return {};
  }
  // The stream ended: {} when it ended between frames, errc::protocol (truncated) otherwise.
  std::error_code finish() const noexcept {
    if (err_) return err_;
    return hfill_ == 0 ? std::error_code{} : make_error_code(errc::protocol);
  }

 private:
  limits lim_;
  std::error_code err_;
  std::byte hbuf_[header_bytes];
  std::size_t hfill_ = 0;
  frame_header h_{};
  std::vector<std::byte> payload_;
};

// ---- handshake ------------------------------------------------------------------------------

template <class T>
inline std::span<const std::byte> bytes_of(const T& v) noexcept {
  return std::as_bytes(std::span(&v, 1));
}

// 32 bytes from the OS entropy source.
inline void fill_nonce(std::uint8_t (&n)[32]) {
  std::random_device rd;
  for (int i = 0; i < 32; i += 4) {
    std::uint32_t v = rd();
    std::memcpy(n + i, &v, 4);
  }
}

// The greeting of a rank. Ensures: mac is zero; nonce fresh.
inline hello_body make_hello(int rank, int size, std::uint64_t epoch, std::uint16_t port,
                             int streams = 1) {
  hello_body h{};
  h.rank = static_cast<std::uint32_t>(rank);
  h.size = static_cast<std::uint32_t>(size);
  h.epoch = epoch;
  h.listen_port = port;
  h.streams = static_cast<std::uint32_t>(streams);
  fill_nonce(h.nonce);
  return h;
}

// The streams per link a greeting announces (0, from older peers: 1).
inline std::uint32_t streams_of(const hello_body& h) noexcept {
  return h.streams ? h.streams : 1;
}

// Checks a peer's greeting against this group. Ensures: {} iff size, epoch and streams per link
// agree and the rank and stream are in range and the rank not ours; errc::mismatch
// (size/epoch/streams) or errc::protocol (rank, stream).
inline std::error_code check_hello(const hello_body& h, int my_rank, int size, std::uint64_t epoch,
                                   int streams = 1) noexcept {
  const std::uint32_t theirs = streams_of(h);
  if (h.size != static_cast<std::uint32_t>(size) || h.epoch != epoch ||
      theirs != static_cast<std::uint32_t>(streams))
    return errc::mismatch;
  if (h.rank >= static_cast<std::uint32_t>(size) || h.rank == static_cast<std::uint32_t>(my_rank) ||
      h.stream >= theirs)
    return errc::protocol;
  return {};
}

}  // namespace paco::net::wire
