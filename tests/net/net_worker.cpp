// paco_net_worker RANK SIZE PORT N ITERS DEADLINE_MS REGROUP_PORT [--tls-dir DIR]
// One rank of the multi-process tests: all-reduces of N floats over asio_tcp (coordinator
// 127.0.0.1:PORT), checking exact results. Prints "ready", then "ok ITERS" or, when an
// all-reduce fails, "error MS MESSAGE" (MS: time from the start of the failed call). After an
// error with REGROUP_PORT > 0, the survivors form the next group (elastic rendezvous, epoch 1,
// rank 0 coordinating on 127.0.0.1:REGROUP_PORT), run one all-reduce, print "regroup SIZE ok".
// --tls-dir DIR: every link over TLS with DIR/ca.pem and DIR/node<RANK % 2>.pem / .key.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "paco/collectives/collectives.hpp"
#include "paco/net/asio_tcp.hpp"

using namespace paco;

static bool check(const std::vector<float>& x, int p) {
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] != float(p * (p + 1) / 2 * int(i % 89 + 1))) return false;
  return true;
}
static void fill(std::vector<float>& x, int r) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float((r + 1) * int(i % 89 + 1));
}

// paco_net_worker rate RANK ADDR0 ADDR1 BYTES RATE_BPS: rank 0 sends BYTES in 1 MiB messages
// to rank 1 over asio_tcp (peers list); rank 1 prints "rate <bytes/s>" measured from the first
// to the last message. RATE_BPS > 0 turns on paco's own shaper at that rate.
static int rate_mode(char** argv) {
  int rank = std::atoi(argv[2]);
  std::size_t bytes = std::strtoull(argv[5], nullptr, 10);
  net::tcp_options o;
  o.rank = rank;
  o.size = 2;
  o.peers = {argv[3], argv[4]};
  o.token = "rate";
  o.shaper.rate_bytes_per_s = std::atof(argv[6]);
  auto tr = net::asio_tcp::connect(o);
  if (!tr) {
    std::printf("connect-error %s\n", tr.error().what().c_str());
    return 1;
  }
  auto& t = *tr.value();
  const std::size_t m = std::size_t(1) << 20;
  std::vector<std::byte> buf(m);
  auto d = net::after(std::chrono::seconds(120));
  if (rank == 0) {
    std::vector<net::asio_tcp::request> q;
    for (std::size_t off = 0; off < bytes; off += m) q.push_back(t.send(1, 1, buf, d));
    for (auto& r : q)
      if (auto ec = r.wait()) return std::printf("send-error %s\n", ec.message().c_str()), 1;
    std::vector<std::byte> ack(1);
    t.recv(1, 2, ack, d).wait();
    return 0;
  }
  if (auto ec = t.recv(0, 1, buf, d).wait())
    return std::printf("recv-error %s\n", ec.message().c_str()), 1;
  auto t0 = net::clock::now();
  std::size_t got = m;
  for (; got < bytes; got += m)
    if (auto ec = t.recv(0, 1, buf, d).wait())
      return std::printf("recv-error %s\n", ec.message().c_str()), 1;
  double s = std::chrono::duration<double>(net::clock::now() - t0).count();
  std::printf("rate %.0f\n", static_cast<double>(got - m) / s);
  std::vector<std::byte> ack(1);
  t.send(0, 2, ack, d).wait();
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 7 && std::string(argv[1]) == "rate") return rate_mode(argv);
  std::string tls_dir;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--tls-dir") {
      tls_dir = argv[i + 1];
      for (int j = i; j + 2 <= argc; ++j) argv[j] = argv[j + 2];
      argc -= 2;
      break;
    }
  if (argc < 8) return 2;
  int rank = std::atoi(argv[1]), p = std::atoi(argv[2]), port = std::atoi(argv[3]);
  std::size_t n = std::strtoull(argv[4], nullptr, 10);
  int iters = std::atoi(argv[5]);
  auto deadline = std::chrono::milliseconds(std::atoi(argv[6]));
  int regroup = std::atoi(argv[7]);
  net::tcp_options o;
  o.rank = rank;
  o.size = p;
  o.coordinator = "127.0.0.1:" + std::to_string(port);
  o.token = "multiproc";
  o.heartbeat_interval = std::chrono::milliseconds(100);
  o.peer_timeout = std::chrono::milliseconds(1000);
  if (!tls_dir.empty()) {
    std::string n = tls_dir + "/node" + std::to_string(rank % 2);
    o.tls = {.enabled = true,
             .ca_file = tls_dir + "/ca.pem",
             .cert_file = n + ".pem",
             .key_file = n + ".key"};
  }
  auto tr = net::asio_tcp::connect(o);
  if (!tr) {
    std::printf("connect-error %s\n", tr.error().what().c_str());
    return 1;
  }
  auto& t = *tr.value();
  std::printf("ready\n");
  std::fflush(stdout);
  std::vector<float> x(n);
  for (int it = 0; it < iters; ++it) {
    fill(x, rank);
    auto t0 = net::clock::now();
    auto st = collectives::allreduce_ring(t, std::span<float>(x), {.until = t0 + deadline});
    auto ms = std::chrono::duration<double, std::milli>(net::clock::now() - t0).count();
    if (!st) {
      std::printf("error %.1f %s\n", ms, st.error().what().c_str());
      std::fflush(stdout);
      if (regroup <= 0) return 3;
      // The next group: every survivor calls connect() with epoch + 1 and its old rank as
      // member id; rank 0 admits those that arrive within the join window.
      tr.value()->abort();
      net::tcp_options g = o;
      g.epoch = 1;
      g.coordinator = "127.0.0.1:" + std::to_string(regroup);
      g.join_window = std::chrono::milliseconds(3000);
      auto t2 = net::asio_tcp::connect(g);
      if (!t2) {
        std::printf("regroup-error %s\n", t2.error().what().c_str());
        return 4;
      }
      int me = t2.value()->rank();
      g.size = t2.value()->size();
      fill(x, me);
      auto st2 = collectives::allreduce_ring(*t2.value(), std::span<float>(x),
                                             {.until = net::after(std::chrono::seconds(10))});
      if (!st2 || !check(x, g.size)) {
        std::printf("regroup-allreduce-error %s\n",
                    st2 ? "wrong result" : st2.error().what().c_str());
        return 5;
      }
      std::printf("regroup %d ok\n", g.size);
      return 0;
    }
    if (!check(x, p)) {
      std::printf("wrong-result\n");
      return 6;
    }
  }
  std::printf("ok %d\n", iters);
  return 0;
}
