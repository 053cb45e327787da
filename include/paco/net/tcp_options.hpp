#pragma once
// tcp_options: the configuration of one rank's asio_tcp endpoint (rendezvous, liveness,
// buffering, the per-link shaper, TLS), and the checks connect() makes of it before it
// opens anything. Plain data, so it is usable in every build.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/tls_options.hpp"

namespace paco::net {

// A per-link traffic shaper. Defaults: off.
struct shaper_options {
  double rate_bytes_per_s = 0;           // token-bucket rate; 0 = unlimited
  std::size_t burst_bytes = 64 * 1024;   // bucket depth and largest single write (a late timer
                                         // is credited up to this much)
  std::chrono::microseconds latency{0};  // added one-way latency per frame
};

// Configuration of one rank's asio_tcp endpoint. Names and ranges are checked by connect().
struct tcp_options {
  int rank = 0;                           // 0 <= rank < size
  int size = 1;                           // number of ranks; 1 only with allow_single
  std::vector<std::string> peers;         // "host:port" of every rank (size entries), or empty
  std::string coordinator;                // "host:port" of rank 0 when peers is empty
  std::string listen_host = "127.0.0.1";  // coordinator mode: interface ranks > 0 listen on
  std::string token;                      // shared secret of the group (non-empty)
  std::uint64_t epoch = 0;                // group generation; ranks of other epochs are refused
  bool allow_single = false;              // a world of size 1 is refused unless this is set
  // Elastic group (coordinator mode only): when > 0, `size` is the largest group and `rank` a
  // stable member id in 0..size-1 (0 is the coordinator). Rank 0 admits the members that
  // arrive within join_window (or until all size have) and numbers them by id; rank() and
  // size() are then the assigned ones. This is how survivors (and rejoining members) form the
  // next group after a failure: every member calls connect() with epoch + 1.
  std::chrono::milliseconds join_window{0};
  std::chrono::milliseconds connect_timeout{20000};    // whole rendezvous
  std::chrono::milliseconds heartbeat_interval{200};   // idle links send a heartbeat this often
  std::chrono::milliseconds peer_timeout{3000};        // silence after which a peer is lost
  std::chrono::milliseconds linger{1000};              // close(): time to flush and say bye
  std::size_t max_frame_bytes = std::size_t(1) << 30;  // largest accepted message
  std::size_t max_unexpected_bytes = std::size_t(256) << 20;  // per peer, before pushing back
  std::size_t max_queued_sends = 1 << 16;  // per peer; a send beyond fails with too_large
  int socket_buffer_bytes = 0;             // SO_SNDBUF/SO_RCVBUF; 0 = kernel autotuning (or bdp)
  // WAN links. One TCP stream moves at most its window per round trip, and the window is capped
  // by the socket buffers (net.ipv4.tcp_[rw]mem's maximum under autotuning): on a long fat link
  // one stream stays below the line rate. `streams` > 1 opens that many connections per link
  // and stripes every message over them in `streams` contiguous pieces (piece k on stream k,
  // each stream its own I/O thread); every rank of a group must use the same number.
  // `bdp_bytes` (bandwidth x round-trip time of the slowest link) sizes the buffers when
  // socket_buffer_bytes is 0: each stream's share, ceil(bdp_bytes / streams), is set as its
  // SO_SNDBUF/SO_RCVBUF when the kernel's autotuning maximum is below it (autotuning is kept
  // otherwise); see effective_socket_buffer().
  int streams = 1;            // in 1..16
  std::size_t bdp_bytes = 0;  // 0 = unknown
  bool payload_crc = true;    // CRC-32C of every payload (header CRC always)
  shaper_options shaper;      // applied to every outgoing link …
  // … except the links named here: peer_shapers[r] shapes the link to rank r instead (links of
  // different speeds and delays on one machine: heterogeneous WANs, DT-FM's placements). Keys
  // are ranks of the formed group (an elastic group's assigned ranks).
  std::map<int, shaper_options> peer_shapers;
  tls_options tls;  // TLS with mutual certificates; off by default

  // The shaper of the link to `peer`.
  const shaper_options& shaper_to(int peer) const {
    const auto it = peer_shapers.find(peer);
    return it == peer_shapers.end() ? shaper : it->second;
  }
  // Whether any link is shaped.
  bool shaped() const {
    auto on = [](const shaper_options& s) {
      return s.rate_bytes_per_s > 0 || s.latency.count() > 0;
    };
    if (on(shaper)) return true;
    for (const auto& [r, s] : peer_shapers)
      if (on(s)) return true;
    return false;
  }
};

namespace detail {

// The names and ranges connect() checks before it opens anything (the TLS files are checked
// when their context is made). Ensures: ok, or invalid_argument naming the field at fault.
inline status check_tcp_options(const tcp_options& o) {
  auto bad = [](std::string m) -> status { return {errc::invalid_argument, "tcp_options." + m}; };
  if (o.size < 1) return bad("size: must be >= 1, got " + std::to_string(o.size));
  if (o.rank < 0 || o.rank >= o.size)
    return bad("rank: must be in 0.." + std::to_string(o.size - 1) + ", got " +
               std::to_string(o.rank));
  if (o.size == 1 && !o.allow_single)
    return bad(
        "size: a multi-rank transport with world size 1 was asked for (a common launch "
        "mistake); set allow_single = true if a single rank is intended");
  if (o.token.empty()) return bad("token: must be non-empty (shared secret of the group)");
  if (!o.peers.empty() && o.peers.size() != static_cast<std::size_t>(o.size))
    return bad("peers: has " + std::to_string(o.peers.size()) + " entries, size is " +
               std::to_string(o.size));
  if (o.peers.empty() && o.coordinator.empty())
    return bad("peers / coordinator: one must be given");
  if (o.heartbeat_interval.count() <= 0 || o.peer_timeout <= o.heartbeat_interval)
    return bad("peer_timeout: must exceed heartbeat_interval (> 0)");
  if (o.shaper.burst_bytes == 0) return bad("shaper.burst_bytes: must be >= 1");
  if (o.streams < 1 || o.streams > 16)
    return bad("streams: must be in 1..16, got " + std::to_string(o.streams));
  if (o.streams > 1 && o.tls.enabled)
    return bad("streams: TLS links have one stream (set streams = 1 or tls.enabled = false)");
  if (o.socket_buffer_bytes < 0)
    return bad("socket_buffer_bytes: must be >= 0, got " + std::to_string(o.socket_buffer_bytes));
  if (o.bdp_bytes > (std::size_t(1) << 34))
    return bad("bdp_bytes: " + std::to_string(o.bdp_bytes) + " is beyond any link (max 16 GiB)");
  for (const auto& [r, sh] : o.peer_shapers) {
    const std::string k = "peer_shapers[" + std::to_string(r) + "]";
    if (r < 0 || r >= o.size || r == o.rank)
      return bad(k + ": not another rank of the group (0.." + std::to_string(o.size - 1) +
                 ", this rank " + std::to_string(o.rank) + ")");
    if (sh.burst_bytes == 0) return bad(k + ".burst_bytes: must be >= 1");
    if (!(sh.rate_bytes_per_s >= 0) || sh.latency.count() < 0)
      return bad(k + ": rate and latency must be >= 0");
  }
  if (o.join_window.count() > 0 && !o.peers.empty())
    return bad("join_window: elastic groups need the coordinator rendezvous (peers empty)");
  return {};
}

}  // namespace detail

}  // namespace paco::net
