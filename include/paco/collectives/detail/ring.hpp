#pragma once
// The ring engine shared by allreduce_ring, reduce_scatter and all_gather (Gloo's
// allreduce_ring, chunked and pipelined). Positions 0..p-1 along the ring; the rank at
// position i sends to position i+1 and receives from i-1. Segment j (mod p) is the block of
// the rank at position j-1, so after the reduce-scatter half (steps 0..p-2) position i holds
// the reduction of segment i+1 = its own block. At step s position i sends segment i-s and
// receives segment i-s-1: reduce-scatter reduces it into place, all-gather (steps p-1..2p-3)
// receives it straight into the caller's buffer. A chunk received at step s is forwarded at
// step s+1 as soon as it is reduced, so the steps overlap.
//
// On a transport that checksums payloads (asio_tcp: recv_unverified, send_with_crc), no byte
// is checksummed in a pass of its own where a pass over it is made anyway: reduce-scatter
// verifies a received chunk's CRC-32C and computes the reduced chunk's while it reduces
// (reduce_crc.hpp), and all-gather forwards a chunk with the CRC its recv verified.

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "paco/collectives/detail/reduce_crc.hpp"
#include "paco/collectives/options.hpp"
#include "paco/core/error.hpp"
#include "paco/core/slice.hpp"
#include "paco/net/concepts.hpp"

namespace paco::collectives::detail {

inline int mod(int a, int p) noexcept {
  return ((a % p) + p) % p;
}

// The ring order to use, or an error naming the accepted form.
inline result<std::vector<int>> resolve_order(std::span<const int> order, int p) {
  std::vector<int> ord(static_cast<std::size_t>(p));
  if (order.empty()) {
    for (int i = 0; i < p; ++i) ord[static_cast<std::size_t>(i)] = i;
    return ord;
  }
  if (order.size() != static_cast<std::size_t>(p))
    return {errc::invalid_argument, "collective_options.order: has " +
                                        std::to_string(order.size()) +
                                        " entries, need p = " + std::to_string(p)};
  std::vector<char> seen(static_cast<std::size_t>(p), 0);
  for (std::size_t i = 0; i < order.size(); ++i) {
    int r = order[i];
    if (r < 0 || r >= p || seen[static_cast<std::size_t>(r)])
      return {errc::invalid_argument,
              "collective_options.order: must be a permutation of 0.." + std::to_string(p - 1)};
    seen[static_cast<std::size_t>(r)] = 1;
    ord[i] = r;
  }
  return ord;
}

inline paco::error op_error(const char* coll, const char* what, int peer, std::size_t step,
                            std::size_t steps, std::error_code ec) {
  return {ec, std::string(coll) + ": " + what + " rank " + std::to_string(peer) + " at step " +
                  std::to_string(step + 1) + " of " + std::to_string(steps) + ": " + ec.message()};
}

template <class V>
inline std::span<const std::byte> cbytes(const V* p, std::size_t n) noexcept {
  return {reinterpret_cast<const std::byte*>(p), n * sizeof(V)};
}
template <class V>
inline std::span<std::byte> wbytes(V* p, std::size_t n) noexcept {
  return {reinterpret_cast<std::byte*>(p), n * sizeof(V)};
}

// Uninitialised storage for n elements of V owned by this thread, grown on demand and reused.
template <class V>
inline V* scratch(std::size_t n) {
  static_assert(std::is_trivially_copyable_v<V>);
  struct holder {
    std::unique_ptr<std::byte[]> p;
    std::size_t bytes = 0;
  };
  thread_local holder h;
  std::size_t need = n * sizeof(V) + 64;
  if (h.bytes < need) {
    h.p = std::make_unique_for_overwrite<std::byte[]>(need);
    h.bytes = need;
  }
  void* ptr = h.p.get();
  std::size_t space = h.bytes;
  return static_cast<V*>(std::align(64, n * sizeof(V), ptr, space));
}

// Runs ring steps [s0, s1) of 0..2p-3 over data (see file comment).
// Requires: every rank calls with the same s0, s1, n, options.
template <net::Transport T, class V, class Op>
status ring_steps(const char* name, T& t, slice<V> data, const collective_options& o, Op op, int s0,
                  int s1) {
  using req_t = typename T::request;
  constexpr bool fused_crc = requires(req_t r, std::span<std::byte> b) {
    t.recv_unverified(0, o.tag, b, o.until);
    r.expected_crc();
    r.payload_crc();
    t.send_with_crc(0, o.tag, cbytes(data.data(), 1), 0u, o.until);
  };
  const int p = t.size();
  const std::size_t n = data.size();
  if (p == 1 || n == 0 || s0 >= s1) return {};
  auto ordr = resolve_order(o.order, p);
  if (!ordr) return ordr.error();
  const auto& ord = ordr.value();
  int pos = 0;
  while (ord[static_cast<std::size_t>(pos)] != t.rank()) ++pos;
  const int right = ord[static_cast<std::size_t>(mod(pos + 1, p))];
  const int left = ord[static_cast<std::size_t>(mod(pos - 1, p))];
  const std::size_t chunk = std::max<std::size_t>(1, o.chunk_bytes / sizeof(V));
  const std::size_t steps_total = static_cast<std::size_t>(s1 - s0);
  const int rs_end = p - 1;  // steps < rs_end reduce, steps >= rs_end copy

  auto seg = [&](int j) {  // {offset, count} of segment j
    return block_of(n, p, ord[static_cast<std::size_t>(mod(j - 1, p))]);
  };
  std::size_t maxseg = block_of(n, p, 0).second;
  // Scratch for the reduce-scatter half: two segments, reused across calls on this thread
  // (no allocation or page faults in steady state).
  V* tmp = s0 < rs_end ? scratch<V>(2 * maxseg) : nullptr;

  std::vector<std::vector<req_t>> sends(static_cast<std::size_t>(p));  // by segment
  auto send_chunk = [&](int j, std::size_t off, std::size_t cnt) {
    sends[static_cast<std::size_t>(mod(j, p))].push_back(
        t.send(right, o.tag, cbytes(data.data() + off, cnt), o.until));
  };
  // Posts the recvs of step s; for copy steps first waits the sends out of that segment.
  auto post_recvs = [&](int s, std::vector<req_t>& out) -> status {
    out.clear();
    int j = pos - s - 1;
    auto [off, cnt] = seg(j);
    V* dst;
    if (s < rs_end) {
      dst = tmp + static_cast<std::size_t>(s % 2) * maxseg;
    } else {
      for (auto& r : sends[static_cast<std::size_t>(mod(j, p))])
        if (auto ec = r.wait())
          return op_error(name, "send to", right, static_cast<std::size_t>(s - s0), steps_total,
                          ec);
      sends[static_cast<std::size_t>(mod(j, p))].clear();
      dst = data.data() + off;
    }
    for (std::size_t c = 0; c < cnt; c += chunk) {
      auto bytes = wbytes(dst + c, std::min(chunk, cnt - c));
      if constexpr (fused_crc)
        if (s < rs_end) {  // verified while it is reduced
          out.push_back(t.recv_unverified(left, o.tag, bytes, o.until));
          continue;
        }
      out.push_back(t.recv(left, o.tag, bytes, o.until));
    }
    return {};
  };

  // The first step's recvs go out before its sends: a neighbour's chunks then land in place
  // instead of being buffered as unexpected and copied again.
  std::vector<req_t> cur, next;
  if (auto st = post_recvs(s0, cur); !st) return st;
  {  // the first step's sends
    auto [off, cnt] = seg(pos - s0);
    for (std::size_t c = 0; c < cnt; c += chunk)
      send_chunk(pos - s0, off + c, std::min(chunk, cnt - c));
  }
  for (int s = s0; s < s1; ++s) {
    if (s + 1 < s1)
      if (auto st = post_recvs(s + 1, next); !st) return st;
    int j = pos - s - 1;
    auto [off, cnt] = seg(j);
    const V* src = tmp + static_cast<std::size_t>(s % 2) * maxseg;
    std::size_t k = 0;
    for (std::size_t c = 0; c < cnt; c += chunk, ++k) {
      std::size_t m = std::min(chunk, cnt - c);
      if (auto ec = cur[k].wait())
        return op_error(name, "recv from", left, static_cast<std::size_t>(s - s0), steps_total, ec);
      V* out = data.data() + off + c;
      const bool forward = s + 1 < s1;
      if constexpr (fused_crc) {
        std::optional<std::uint32_t> crc;  // of out's bytes, when known
        if (s < rs_end) {
          if (auto want = cur[k].expected_crc()) {
            std::uint32_t got = 0, out_crc = 0;
            reduce_into_crc(out, src + c, m, op, &got, forward ? &out_crc : nullptr);
            if (got != *want)
              return op_error(name, "recv from", left, static_cast<std::size_t>(s - s0),
                              steps_total, make_error_code(errc::corrupt));
            crc = out_crc;
          } else {  // the frame carried no CRC
            reduce_into(out, src + c, m, op);
          }
        } else {
          crc = cur[k].payload_crc();  // all-gather forwards the bytes its recv verified
        }
        if (forward && crc) {
          sends[static_cast<std::size_t>(mod(j, p))].push_back(
              t.send_with_crc(right, o.tag, cbytes(out, m), *crc, o.until));
          continue;
        }
      } else if (s < rs_end) {
        reduce_into(out, src + c, m, op);
      }
      if (forward) send_chunk(j, off + c, m);
    }
    std::swap(cur, next);
  }
  for (auto& v : sends)
    for (auto& r : v)
      if (auto ec = r.wait())
        return op_error(name, "send to", right, steps_total - 1, steps_total, ec);
  return {};
}

}  // namespace paco::collectives::detail
