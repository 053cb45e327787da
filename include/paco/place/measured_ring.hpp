#pragma once
// measured_ring: the bandwidth of every link of a group, measured over its Transport when the
// group forms, and the ring order (ring_order.hpp) it implies: ranks on fast links sit next to
// each other in the ring all-reduce (PCCL measures its peers the same way before it orders
// them; here the measurement is pairwise and blocking, a one-off at formation).
//
// The probe: the ranks pair up in a round-robin tournament (the circle method: p - 1 rounds, or
// p with a bye when p is odd; every pair meets once, disjoint pairs at the same time). In a
// pair (a < b) each direction is timed in turn: a 1-byte ping-pong waits for the peer, a second
// gives the round trip, then probe_bytes go one way and a 1-byte acknowledgement comes back; the
// direction's bandwidth is probe_bytes / (elapsed - round trip). Every rank then holds its row (to
// each peer) and an all-gather gives every rank the same p x p matrix, hence the same order.
//
// What it measures: the goodput of one message of probe_bytes over the transport as it is
// configured (its streams, buffers and shaper), TCP slow start included: pick probe_bytes
// several bandwidth-delay products long for a figure near the steady rate.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "paco/collectives/all_gather.hpp"
#include "paco/collectives/options.hpp"
#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/place/ring_order.hpp"

namespace paco::place {

// Settings of the probe.
struct link_probe_options {
  std::size_t probe_bytes = std::size_t(4) << 20;  // one timed message per direction, >= 1
  // Deadline of the whole probe, tags: o.tag .. o.tag + 3 (ping, probe, ack, the all-gather).
  collectives::collective_options collective{};
};

// The measured links of a group of p ranks.
struct measured_links {
  int p = 0;
  std::vector<double> bandwidth;  // (p, p) row-major, bytes/s from i to j; diagonal 0
  std::vector<double> rtt_s;      // (p, p) round trips in seconds; diagonal 0
};

// The pairs of round k of the circle method over n ranks (n even: pad odd p with a bye, rank
// n - 1 == p standing for nobody). Ensures: every pair {a, b} of 0..n-1 meets in exactly one
// round of 0..n-2.
inline std::vector<std::pair<int, int>> tournament_round(int n, int k) {
  std::vector<std::pair<int, int>> pairs;
  auto seat = [&](int i) { return i == 0 ? 0 : 1 + (i - 1 + k) % (n - 1); };
  for (int i = 0; i < n / 2; ++i) {
    const int a = seat(i), b = seat(n - 1 - i);
    pairs.emplace_back(std::min(a, b), std::max(a, b));
  }
  return pairs;
}

// Measures every link of t's group (see the file comment); a collective: every rank calls it
// with the same options.
// Requires: o.probe_bytes >= 1. Ensures: on every rank the same matrices (the all-gather's
// bytes), each off-diagonal bandwidth finite and > 0. Errors: invalid_argument (options), the
// transport's (timeout at o.collective.until, peer_lost), naming the step and peer.
template <net::Transport T>
result<measured_links> measure_links(T& t, const link_probe_options& o = {}) {
  using clk = std::chrono::steady_clock;
  if (o.probe_bytes == 0)
    return {errc::invalid_argument, "link_probe_options.probe_bytes: must be >= 1"};
  const int p = t.size(), me = t.rank();
  const auto up = static_cast<std::size_t>(p);
  const net::tag_t ping = o.collective.tag, data = ping + 1, ack = ping + 2;
  const auto until = o.collective.until;
  std::vector<std::byte> buf(o.probe_bytes);
  std::byte one[1] = {std::byte{1}};
  std::vector<double> row(up * 2, 0.0);  // bandwidth to each peer, then round trip to each
  auto fail = [&](const char* step, int peer, std::error_code ec) -> paco::error {
    return {ec, std::string("measure_links: ") + step + " with rank " + std::to_string(peer) +
                    ": " + ec.message()};
  };
  // One direction of a pair: `from` times it, `to` answers.
  auto direction = [&](int from, int to) -> status {
    const bool timing = me == from;
    const int peer = timing ? to : from;
    if (timing) {
      // The first ping-pong waits for the peer to reach this pair (it may still be busy with
      // another); the second is timed.
      if (auto ec = t.send(peer, ping, one, until).wait()) return fail("ping", peer, ec);
      if (auto ec = t.recv(peer, ping, one, until).wait()) return fail("pong", peer, ec);
      const auto t0 = clk::now();
      if (auto ec = t.send(peer, ping, one, until).wait()) return fail("ping", peer, ec);
      if (auto ec = t.recv(peer, ping, one, until).wait()) return fail("pong", peer, ec);
      const double rtt = std::chrono::duration<double>(clk::now() - t0).count();
      const auto t1 = clk::now();
      auto s = t.send(peer, data, buf, until);
      if (auto ec = t.recv(peer, ack, one, until).wait()) return fail("acknowledgement", peer, ec);
      if (auto ec = s.wait()) return fail("probe", peer, ec);
      const double dt = std::chrono::duration<double>(clk::now() - t1).count();
      // At least a microsecond of transfer: a loopback figure stays finite.
      const double transfer = std::max(dt - rtt, 1e-6);
      row[static_cast<std::size_t>(peer)] = static_cast<double>(o.probe_bytes) / transfer;
      row[up + static_cast<std::size_t>(peer)] = rtt;
    } else {
      for (int k = 0; k < 2; ++k) {
        if (auto ec = t.recv(peer, ping, one, until).wait()) return fail("ping", peer, ec);
        if (auto ec = t.send(peer, ping, one, until).wait()) return fail("pong", peer, ec);
      }
      if (auto ec = t.recv(peer, data, buf, until).wait()) return fail("probe", peer, ec);
      if (auto ec = t.send(peer, ack, one, until).wait()) return fail("acknowledgement", peer, ec);
    }
    return {};
  };
  const int n = p + (p % 2);  // with a bye when p is odd
  for (int k = 0; k + 1 < n; ++k)
    for (auto [a, b] : tournament_round(n, k)) {
      if (b >= p || (me != a && me != b)) continue;
      if (auto st = direction(a, b); !st) return st.error();
      if (auto st = direction(b, a); !st) return st.error();
    }
  // Every rank's row, gathered: block r of the all-gather is rank r's 2p values.
  std::vector<double> all(up * up * 2, 0.0);
  std::copy(row.begin(), row.end(), all.begin() + static_cast<std::ptrdiff_t>(2 * up * me));
  auto co = o.collective;
  co.tag = ping + 3;
  if (p > 1)
    if (auto st = collectives::all_gather(t, std::span<double>(all), co); !st)
      return paco::error{st.error().code,
                         "measure_links: gathering the rows: " + st.error().message};
  measured_links m;
  m.p = p;
  m.bandwidth.assign(up * up, 0.0);
  m.rtt_s.assign(up * up, 0.0);
  for (std::size_t i = 0; i < up; ++i)
    for (std::size_t j = 0; j < up; ++j) {
      m.bandwidth[i * up + j] = all[2 * up * i + j];
      m.rtt_s[i * up + j] = all[2 * up * i + up + j];
    }
  return m;
}

// The ring order of t's group from its measured links: measure_links, then ring_order over the
// bandwidths (the same permutation on every rank). Hand it to a ring collective as
// collective_options::order. Ensures: a permutation of 0..p-1; the links in `links` when given.
template <net::Transport T>
result<std::vector<int>> measured_ring_order(T& t, const link_probe_options& o = {},
                                             const ring_order_config& c = {},
                                             measured_links* links = nullptr) {
  auto m = measure_links(t, o);
  if (!m) return m.error();
  auto order = ring_order(m.value().bandwidth, m.value().p, c);
  if (links) *links = std::move(m.value());
  return order;
}

}  // namespace paco::place
