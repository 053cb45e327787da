// bench_wan_worker: one end of the WAN goodput benchmark (bench/wan/run.sh). Rank 0 sends
// MESSAGES messages of MESSAGE_BYTES to rank 1 over asio_tcp (STREAMS TCP streams per link,
// buffers for BDP_BYTES, 4 messages in flight); rank 1 times each arrival and prints the
// goodput over the messages that arrived after the first WARM_S seconds (TCP's start-up left
// out) as one JSON line, with the socket buffers the kernel reports.
//
//   bench_wan_worker RANK HOST0:PORT HOST1:PORT STREAMS BDP_BYTES MESSAGE_BYTES MESSAGES WARM_S
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "paco/net/asio_tcp.hpp"
#include "paco/place/measured_ring.hpp"

using namespace paco;

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr,
                 "usage: %s RANK HOST0:PORT HOST1:PORT STREAMS BDP_BYTES MESSAGE_BYTES MESSAGES "
                 "WARM_S\n",
                 argv[0]);
    return 2;
  }
  net::tcp_options o;
  o.rank = std::atoi(argv[1]);
  o.size = 2;
  o.peers = {argv[2], argv[3]};
  o.token = "bench-wan";
  o.streams = std::atoi(argv[4]);
  o.bdp_bytes = std::strtoull(argv[5], nullptr, 10);
  o.connect_timeout = std::chrono::seconds(30);
  o.peer_timeout = std::chrono::seconds(10);  // a long round trip, a full queue: not a loss
  o.heartbeat_interval = std::chrono::milliseconds(500);
  const std::size_t m = std::strtoull(argv[6], nullptr, 10);
  const long n = std::atol(argv[7]);
  const double warm = std::atof(argv[8]);
  if (m == 0 || n < 2) {
    std::fprintf(stderr, "bench_wan_worker: need MESSAGE_BYTES >= 1 and MESSAGES >= 2\n");
    return 2;
  }
  auto t = net::asio_tcp::connect(o);
  if (!t) {
    std::fprintf(stderr, "bench_wan_worker rank %d: %s\n", o.rank, t.error().what().c_str());
    return 1;
  }
  auto& tr = *t.value();
  using clk = std::chrono::steady_clock;
  // The round trip of the link, as the library measures links when a group forms (a timed
  // 1-byte ping-pong each way; the probe itself kept to one byte).
  place::link_probe_options po;
  po.probe_bytes = 1;
  po.collective.until = net::after(std::chrono::seconds(30));
  auto links = place::measure_links(tr, po);
  if (!links) {
    std::fprintf(stderr, "bench_wan_worker rank %d: %s\n", o.rank, links.error().what().c_str());
    return 1;
  }
  const double rtt = links.value().rtt_s[1 * 2 + 0];  // rank 1 -> rank 0
  const int in_flight = 4;
  std::vector<std::vector<std::byte>> bufs(in_flight, std::vector<std::byte>(m, std::byte{7}));
  std::vector<net::asio_tcp::request> reqs(in_flight);
  const auto until = net::after(std::chrono::minutes(10));
  std::vector<clk::time_point> arrived;
  const auto t0 = clk::now();
  for (long i = 0; i < n + in_flight; ++i) {
    auto& r = reqs[static_cast<std::size_t>(i % in_flight)];
    if (i >= in_flight) {
      if (auto ec = r.wait()) {
        std::fprintf(stderr, "bench_wan_worker rank %d: message %ld: %s\n", o.rank, i - in_flight,
                     ec.message().c_str());
        return 1;
      }
      arrived.push_back(clk::now());
    }
    if (i >= n) continue;
    auto& b = bufs[static_cast<std::size_t>(i % in_flight)];
    r = o.rank == 0 ? tr.send(1, 1, b, until) : tr.recv(0, 1, b, until);
  }
  if (o.rank == 1) {
    // The first arrival after the warm-up, to the last: whole messages over their time.
    std::size_t i0 = 0;
    while (i0 + 2 < arrived.size() &&
           std::chrono::duration<double>(arrived[i0] - t0).count() < warm)
      ++i0;
    const double dt = std::chrono::duration<double>(arrived.back() - arrived[i0]).count();
    const double bytes = static_cast<double>(arrived.size() - 1 - i0) * static_cast<double>(m);
    const auto [snd, rcv] = tr.socket_buffers(0);
    std::printf(
        "{\"streams\":%d,\"bdp_bytes\":%zu,\"rtt_ms\":%.2f,\"messages\":%zu,\"seconds\":%.3f,"
        "\"goodput_Bps\":%.0f,\"so_sndbuf\":%d,\"so_rcvbuf\":%d}\n",
        o.streams, o.bdp_bytes, rtt * 1e3, arrived.size() - 1 - i0, dt, dt > 0 ? bytes / dt : 0.0,
        snd, rcv);
  }
  // A last exchange so that neither end closes while the other still reads.
  std::byte one[1] = {};
  auto s = tr.send(1 - o.rank, 2, one, until);
  std::byte got[1];
  if (auto ec = tr.recv(1 - o.rank, 2, got, until).wait()) return 1;
  s.wait();
  tr.close();
  return 0;
}
