#pragma once
// wire: the packed, little-endian messages between a worker and a module store
// (server.hpp, client.hpp), per worker → store rank:
//   request{kind, module, round, worker, weight, count}       tag request_tag
//   push:          request, then count floats (Δ, fp32)        tag payload_tag
//   push_encoded:  request, then count bytes (a module_codec   tag payload_tag
//                  payload: header, levels, bodies)
//   store → worker: reply{status, module, round, hash, count}  tag reply_tag
//   push, push_encoded: reply{count = the push's staleness: 0 on time, s when merged s rounds
//          late into the open round (server_options::max_staleness)}
//   pull:  reply, then count floats (θ)                         tag data_tag
//   wait:  reply once the round is closed (or the request's deadline passed), count = the
//          module's push pace in microseconds (store/push_pace.hpp; 0: not yet known)
//   describe: reply{count = bytes, hash = hash64 of them}, then the store's description of its
//          run (server_options::describe: text, e.g. a job's routing and module rounds)
//                                                               tag data_tag
//   report: request{round, weight = the round's loss, count = tokens per second}; no reply
//   hello: request{reserved = protocol_version}, reply{count = the store's protocol_version};
//          each side refuses a peer of another version by name (errc::version)
// local_store counts the same bytes for its in-process pushes (push_bytes).

#include <cstddef>
#include <cstdint>
#include <span>

#include "paco/net/concepts.hpp"

namespace paco::store::wire {

// The store protocol's version, exchanged in hello. 2: a push carries the round its Δ started
// from and its reply the push's staleness (quorum, late work merged); 0: before versions.
inline constexpr std::uint32_t protocol_version = 2;

inline constexpr net::tag_t request_tag = 0x53100001u;
inline constexpr net::tag_t payload_tag = 0x53100002u;
inline constexpr net::tag_t reply_tag = 0x53100003u;
inline constexpr net::tag_t data_tag = 0x53100004u;

enum class kind : std::uint32_t {
  hello = 1,
  pull = 2,
  push = 3,
  wait = 4,
  bye = 5,
  push_encoded = 6,
  describe = 7,
  report = 8
};

#pragma pack(push, 1)
struct request {
  std::uint32_t kind;
  std::int32_t module;
  std::int64_t round;
  std::int32_t worker;
  std::uint32_t reserved;
  double weight;
  std::uint64_t count;  // floats (push, pull) or bytes (push_encoded) that follow
};
struct reply {
  std::int32_t status;  // paco::errc
  std::int32_t module;
  std::int64_t round;
  std::uint64_t hash;
  std::uint64_t count;
};
#pragma pack(pop)
static_assert(sizeof(request) == 40 && sizeof(reply) == 32, "store wire structs are packed");

// Bytes a worker puts on the wire for one push whose payload is `payload` bytes (4n for fp32).
inline constexpr std::size_t push_bytes(std::size_t payload) noexcept {
  return sizeof(request) + payload;
}

template <class V>
std::span<const std::byte> bytes_of(const V& v) {
  return {reinterpret_cast<const std::byte*>(&v), sizeof v};
}
template <class V>
std::span<std::byte> bytes_of(V& v) {
  return {reinterpret_cast<std::byte*>(&v), sizeof v};
}

}  // namespace paco::store::wire
