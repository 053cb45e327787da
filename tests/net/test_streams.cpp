// asio_tcp on WAN settings: links striped over several TCP streams (the conformance suite runs
// over them too: striped_tcp_world), socket buffers sized for a bandwidth-delay product, and the
// links' bandwidth measured at group formation feeding the ring order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "paco/collectives/allreduce_ring.hpp"
#include "paco/net/crc32c.hpp"
#include "paco/place/measured_ring.hpp"
#include "tcp_world.hpp"

using namespace paco;
using namespace std::chrono_literals;

namespace {

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(g());
  return v;
}

bool mentions(const std::string& s, const std::string& w) {
  return s.find(w) != std::string::npos;
}

}  // namespace

TEST_CASE("crc32c_combine: the CRC of a concatenation from its parts'", "[net][crc]") {
  // Reference: the CRC of the joined bytes, computed in one pass.
  for (std::size_t la : {0u, 1u, 7u, 4096u, 100003u})
    for (std::size_t lb : {0u, 1u, 3u, 64u, 65536u, 1000001u}) {
      auto v = random_bytes(la + lb, static_cast<unsigned>(la * 31 + lb));
      const auto whole = net::crc32c(0, v);
      const auto a = net::crc32c(0, {v.data(), la}), b = net::crc32c(0, {v.data() + la, lb});
      INFO(la << " + " << lb);
      REQUIRE(net::crc32c_combine(a, b, lb) == whole);
    }
}

TEST_CASE("asio_tcp streams: pieces of every length reassemble; CRCs combine; a ring runs",
          "[net][streams]") {
  // Lengths around the split's edges: below the stream count, not divisible by it, large.
  const std::vector<std::size_t> lengths = {0, 1, 2, 3, 4, 5, 1000, 65537, 3 * 1048576 + 2};
  std::vector<std::string> errors(2);
  testing::striped_tcp_world::run(2, [&](net::asio_tcp& t) {
    auto& e = errors[static_cast<std::size_t>(t.rank())];
    const int o = 1 - t.rank();
    if (t.streams() != 3) e += "streams() " + std::to_string(t.streams()) + "; ";
    for (std::size_t n : lengths) {
      auto mine = random_bytes(n, static_cast<unsigned>(n * 2 + t.rank()));
      auto theirs = random_bytes(n, static_cast<unsigned>(n * 2 + o));
      std::vector<std::byte> got(n), got2(n);
      auto s = t.send(o, 5, mine, net::after(10s));
      auto r = t.recv(o, 5, got, net::after(10s));
      auto s2 = t.send(o, 6, mine, net::after(10s));
      auto r2 = t.recv_unverified(o, 6, got2, net::after(10s));
      const auto ec = r.wait(), ec2 = r2.wait();
      if (ec || ec2 || s.wait() || s2.wait()) {
        e += "n=" + std::to_string(n) + ": " + ec.message() + "; ";
        continue;
      }
      if (got != theirs || got2 != theirs) e += "n=" + std::to_string(n) + ": bytes differ; ";
      const auto want = net::crc32c(0, theirs);
      if (r.payload_crc() != want) e += "n=" + std::to_string(n) + ": payload_crc; ";
      if (r2.expected_crc() != want) e += "n=" + std::to_string(n) + ": expected_crc; ";
    }
    // A ring all-reduce (recv_unverified + expected_crc, send_with_crc) over striped links.
    std::vector<float> x(250001);
    std::iota(x.begin(), x.end(), static_cast<float>(t.rank()));
    auto st = collectives::allreduce_ring(t, std::span<float>(x), {.chunk_bytes = 1 << 18});
    if (!st) e += "allreduce: " + st.error().message + "; ";
    for (std::size_t i = 0; i < x.size(); i += 9973)
      if (x[i] != 2.0f * static_cast<float>(i) + 1.0f) {
        e += "allreduce value at " + std::to_string(i) + "; ";
        break;
      }
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
    REQUIRE(errors[static_cast<std::size_t>(r)].empty());
  }
}

TEST_CASE("asio_tcp streams: a shaped link keeps its rate, shared by its streams",
          "[net][streams]") {
  // 6 MB at 20 MB/s over 3 streams: 0.3 s (three streams at the full rate each would take 0.1).
  const double rate = 20e6;
  const std::size_t n = 6000000;
  std::vector<double> seconds(2, 0);
  std::vector<std::string> errors(2);
  testing::run_tcp_ranks(
      "shaped_streams", 2,
      [&](int r, int p, int port) {
        auto o = testing::loopback_options(r, p, port);
        o.streams = 3;
        o.shaper.rate_bytes_per_s = rate;
        o.shaper.burst_bytes = 65536;
        return o;
      },
      [&](net::asio_tcp& t) {
        const auto r = static_cast<std::size_t>(t.rank());
        std::vector<std::byte> buf(n);
        const auto t0 = net::clock::now();
        std::error_code ec = t.rank() == 0 ? t.send(1, 1, buf, net::after(10s)).wait()
                                           : t.recv(0, 1, buf, net::after(10s)).wait();
        seconds[r] = std::chrono::duration<double>(net::clock::now() - t0).count();
        if (ec) errors[r] = ec.message();
        std::byte x[1] = {}, y[1];
        auto s = t.send(1 - t.rank(), 2, x, net::after(5s));
        t.recv(1 - t.rank(), 2, y, net::after(5s)).wait();
        s.wait();
      });
  INFO("send " << errors[0] << ", recv " << errors[1] << "; received in " << seconds[1] << " s");
  REQUIRE(errors[0].empty());
  REQUIRE(errors[1].empty());
  const double want = static_cast<double>(n) / rate;
  REQUIRE(seconds[1] > 0.8 * want);
  REQUIRE(seconds[1] < 1.5 * want);
}

TEST_CASE("asio_tcp streams: ranks that disagree on the stream count are refused, named",
          "[net][streams]") {
  // Both ranks hold the token and belong to the same launch (epoch): the coordinator stops at
  // the handshake, not at its connect deadline (20 s here; it used to wait all of it).
  const int port = testing::free_port();
  std::vector<std::string> err(2);
  std::vector<double> took(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      auto o = testing::loopback_options(r, 2, port);
      o.streams = r == 0 ? 2 : 1;
      o.connect_timeout = 20s;
      const auto t0 = std::chrono::steady_clock::now();
      auto t = net::asio_tcp::connect(o);
      took[static_cast<std::size_t>(r)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      err[static_cast<std::size_t>(r)] = t ? "" : t.error().message;
    });
  for (auto& t : th) t.join();
  INFO("rank 0: " << err[0] << " (" << took[0] << " s)\nrank 1: " << err[1] << " (" << took[1]
                  << " s)");
  // Each names both counts.
  REQUIRE(mentions(err[0], "1 stream(s) per link) differs from ours (size 2, epoch 0, 2)"));
  REQUIRE(mentions(err[1], "2 stream(s) per link) differs from ours (size 2, epoch 0, 1)"));
  REQUIRE(took[0] < 10);
  REQUIRE(took[1] < 10);
}

TEST_CASE("asio_tcp: a process of another launch (epoch) is refused without stopping the group",
          "[net][streams]") {
  // Not a member set up otherwise but a stray: the coordinator refuses it and goes on to form
  // its group with the right member.
  const int port = testing::free_port();
  auto stray_o = testing::loopback_options(1, 2, port);
  stray_o.epoch = 7;
  stray_o.streams = 2;
  stray_o.connect_timeout = 3s;
  std::string stray_err;
  std::thread stray([&] {
    auto t = net::asio_tcp::connect(stray_o);
    stray_err = t ? "" : t.error().message;
  });
  std::vector<std::string> err(2, "not run");
  std::thread coord([&] {
    auto t = net::asio_tcp::connect(testing::loopback_options(0, 2, port));
    err[0] = t ? "" : t.error().message;
  });
  stray.join();
  std::thread member([&] {
    auto t = net::asio_tcp::connect(testing::loopback_options(1, 2, port));
    err[1] = t ? "" : t.error().message;
  });
  coord.join();
  member.join();
  INFO("stray: " << stray_err << "\nrank 0: " << err[0] << "\nrank 1: " << err[1]);
  REQUIRE(mentions(stray_err, "refused by the server"));
  REQUIRE(err[0].empty());
  REQUIRE(err[1].empty());
}

TEST_CASE("asio_tcp streams: bad settings are refused before anything opens", "[net][streams]") {
  auto o = testing::loopback_options(0, 2, 1);
  o.streams = 0;
  auto r = net::asio_tcp::connect(o);
  REQUIRE(!r);
  REQUIRE(r.error().code == errc::invalid_argument);
  REQUIRE(mentions(r.error().message, "tcp_options.streams"));
  o.streams = 17;
  REQUIRE(net::asio_tcp::connect(o).error().code == errc::invalid_argument);
  o.streams = 2;
  o.tls.enabled = true;
  auto t = net::asio_tcp::connect(o);
  REQUIRE(!t);
  REQUIRE(mentions(t.error().message, "TLS links have one stream"));
}

TEST_CASE("asio_tcp: socket buffers follow the bandwidth-delay product", "[net][streams]") {
  net::tcp_options o;
  REQUIRE(net::detail::effective_socket_buffer(o) == 0);  // nothing known: autotuning
  o.socket_buffer_bytes = 123456;
  o.bdp_bytes = std::size_t(1) << 30;
  REQUIRE(net::detail::effective_socket_buffer(o) == 123456);  // an explicit size wins
  o.socket_buffer_bytes = 0;
  o.bdp_bytes = 4096;  // far below any autotuning maximum: autotuning is kept
  REQUIRE(net::detail::effective_socket_buffer(o) == 0);
  const auto rx = net::detail::tcp_autotune_max("/proc/sys/net/ipv4/tcp_rmem");
  const auto tx = net::detail::tcp_autotune_max("/proc/sys/net/ipv4/tcp_wmem");
  if (rx == 0 || tx == 0) return;      // no /proc: the remaining rules need the kernel's figures
  o.bdp_bytes = 4 * std::max(rx, tx);  // beyond autotuning: each stream's share is set
  o.streams = 4;
  REQUIRE(net::detail::effective_socket_buffer(o) == static_cast<int>(std::max(rx, tx)));
  // Connected with it, the kernel reports at least the share it was given (root may exceed
  // net.core.*mem_max; others are capped there, and the kernel then reports the cap).
  o.bdp_bytes = std::size_t(16) << 20;
  o.streams = 2;
  const int share = net::detail::effective_socket_buffer(o);
  std::vector<std::pair<int, int>> got(2);
  testing::run_tcp_ranks(
      "bdp", 2,
      [&](int r, int n, int port) {
        auto x = testing::loopback_options(r, n, port);
        x.bdp_bytes = o.bdp_bytes;
        x.streams = 2;
        return x;
      },
      [&](net::asio_tcp& t) {
        got[static_cast<std::size_t>(t.rank())] = t.socket_buffers(1 - t.rank(), 1);
        // Neither closes before the other has read its buffers.
        std::byte x[1] = {}, y[1];
        auto s = t.send(1 - t.rank(), 1, x, net::after(5s));
        t.recv(1 - t.rank(), 1, y, net::after(5s)).wait();
        s.wait();
      });
  if (share == 0) return;
  for (auto [snd, rcv] : got) {
    INFO("share " << share << ", SO_SNDBUF " << snd << ", SO_RCVBUF " << rcv);
    REQUIRE(snd > 0);
    REQUIRE(rcv > 0);
    if (geteuid() == 0) {  // SO_*BUFFORCE: the kernel doubles what was set
      REQUIRE(snd >= share);
      REQUIRE(rcv >= share);
    }
  }
}

TEST_CASE("measure_links: the tournament meets every pair once", "[net][place]") {
  for (int n : {2, 4, 6, 8}) {
    std::vector<int> met(static_cast<std::size_t>(n * n), 0);
    for (int k = 0; k + 1 < n; ++k) {
      std::vector<int> seen(static_cast<std::size_t>(n), 0);
      for (auto [a, b] : place::tournament_round(n, k)) {
        REQUIRE(a < b);
        ++met[static_cast<std::size_t>(a * n + b)];
        ++seen[static_cast<std::size_t>(a)];
        ++seen[static_cast<std::size_t>(b)];
      }
      for (int s : seen) REQUIRE(s == 1);  // each rank in exactly one pair per round
    }
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) REQUIRE(met[static_cast<std::size_t>(a * n + b)] == 1);
  }
}

TEST_CASE("measured ring order: shaped links are measured and the fast ones form the ring",
          "[net][place]") {
  // Four ranks; the links 0-2, 2-1 and 1-3 are shaped to 24 MB/s, every other one to 3 MB/s
  // (paco's shaper, both directions). The cheapest open ring is 0 2 1 3 (or its reverse).
  const double fast = 24e6, slow = 3e6;
  auto rate = [&](int a, int b) {
    auto is = [&](int x, int y) { return (a == x && b == y) || (a == y && b == x); };
    return is(0, 2) || is(2, 1) || is(1, 3) ? fast : slow;
  };
  const int p = 4;
  std::vector<std::vector<int>> orders(p);
  std::vector<place::measured_links> links(p);
  std::vector<std::string> errors(p);
  testing::run_tcp_ranks(
      "measured_ring", p,
      [&](int r, int n, int port) {
        auto o = testing::loopback_options(r, n, port);
        for (int q = 0; q < n; ++q)
          if (q != r) o.peer_shapers[q] = {.rate_bytes_per_s = rate(r, q), .burst_bytes = 16384};
        return o;
      },
      [&](net::asio_tcp& t) {
        const auto r = static_cast<std::size_t>(t.rank());
        place::link_probe_options po;
        po.probe_bytes = std::size_t(3) << 20;
        po.collective.until = net::after(60s);
        auto ord = place::measured_ring_order(t, po, {}, &links[r]);
        if (!ord)
          errors[r] = ord.error().message;
        else
          orders[r] = ord.value();
      });
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
    REQUIRE(errors[static_cast<std::size_t>(r)].empty());
    REQUIRE(orders[static_cast<std::size_t>(r)] == orders[0]);  // one order for the group
    REQUIRE(links[static_cast<std::size_t>(r)].bandwidth == links[0].bandwidth);
  }
  for (int a = 0; a < p; ++a)
    for (int b = 0; b < p; ++b) {
      if (a == b) continue;
      const double got = links[0].bandwidth[static_cast<std::size_t>(a * p + b)];
      INFO(a << " -> " << b << ": measured " << got << " B/s, shaped " << rate(a, b));
      REQUIRE(got > 0.6 * rate(a, b));
      REQUIRE(got < 1.6 * rate(a, b));
    }
  const std::vector<int> want{0, 2, 1, 3}, reverse{3, 1, 2, 0};
  INFO("order " << orders[0][0] << orders[0][1] << orders[0][2] << orders[0][3]);
  REQUIRE((orders[0] == want || orders[0] == reverse));
}
