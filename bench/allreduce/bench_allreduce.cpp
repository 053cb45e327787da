// bench_allreduce MODE RANK SIZE PORT [MAX_BYTES]
//   MODE asio: paco::collectives::allreduce_ring over net::asio_tcp (coordinator 127.0.0.1:PORT)
//   MODE raw:  the same processes moving the same bytes in the same ring pattern over plain
//              blocking TCP sockets (no framing, no checksum, no reduction): chunk c of step
//              s+1 leaves only after chunk c of step s arrived, as in the pipelined ring.
// Rank 0 prints one JSON row per size. Every result is validated before it is timed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "paco/collectives/collectives.hpp"
#include "paco/core/buffer.hpp"
#include "paco/net/asio_tcp.hpp"
#include "ring_common.hpp"

using namespace paco;
using clk = std::chrono::steady_clock;

static double secs_since(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}

static int run_asio(int rank, int p, int port, std::size_t max_bytes) {
  net::tcp_options o;
  o.rank = rank;
  o.size = p;
  o.coordinator = "127.0.0.1:" + std::to_string(port);
  o.token = "bench";
  o.connect_timeout = std::chrono::seconds(30);
  if (const char* e = std::getenv("PACO_BENCH_CRC")) o.payload_crc = std::atoi(e) != 0;
  if (const char* e = std::getenv("PACO_BENCH_SOCKBUF")) o.socket_buffer_bytes = std::atoi(e);
  std::size_t chunk = std::size_t(1) << 20;
  if (const char* e = std::getenv("PACO_BENCH_CHUNK")) chunk = std::strtoull(e, nullptr, 10);
  auto tr = net::asio_tcp::connect(o);
  if (!tr) {
    std::fprintf(stderr, "rank %d: %s\n", rank, tr.error().what().c_str());
    return 1;
  }
  auto& t = *tr.value();
  for (std::size_t bytes : bench::sizes(max_bytes)) {
    std::size_t n = bytes / 4;
    host_buffer<float> x(n);
    int iters = bench::iterations(bytes);
    std::vector<double> secs, cpu;
    for (int it = -2; it < iters; ++it) {
      for (std::size_t i = 0; i < n; ++i) x[i] = float((rank + 1) * int(i % 89 + 1));
      if (auto st =
              collectives::barrier(t, {.until = net::after(std::chrono::seconds(30)), .tag = 2});
          !st) {
        std::fprintf(stderr, "rank %d: %s\n", rank, st.error().what().c_str());
        return 1;
      }
      double c0 = bench::cpu_seconds();
      auto t0 = clk::now();
      auto st = collectives::allreduce_ring(
          t, x.view(), {.until = net::after(std::chrono::seconds(30)), .chunk_bytes = chunk});
      double s = secs_since(t0);
      double c = bench::cpu_seconds() - c0;
      if (!st) {
        std::fprintf(stderr, "rank %d: %s\n", rank, st.error().what().c_str());
        return 1;
      }
      if (it < 0) {  // validate the warm-up results exactly
        for (std::size_t i = 0; i < n; ++i)
          if (x[i] != float(p * (p + 1) / 2 * int(i % 89 + 1))) {
            std::fprintf(stderr, "rank %d: wrong result at %zu\n", rank, i);
            return 1;
          }
        continue;
      }
      secs.push_back(s);
      cpu.push_back(c);
    }
    if (rank == 0) bench::print_row("asio_tcp", bytes, p, secs, cpu);
  }
  return 0;
}

// ---- raw ring over blocking sockets ----
static int must(int rc, const char* what) {
  if (rc < 0) {
    std::perror(what);
    std::exit(1);  // benchmark tool, not library code
  }
  return rc;
}
static void send_all(int fd, const char* p, std::size_t n) {
  while (n) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) must(-1, "send");
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}
static void recv_all(int fd, char* p, std::size_t n) {
  while (n) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) must(-1, "recv");
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}

static int run_raw(int rank, int p, int port, std::size_t max_bytes) {
  // rank r listens on port + 1 + r; connects to its right neighbour, accepts its left.
  int ls = must(::socket(AF_INET, SOCK_STREAM, 0), "socket");
  int one = 1;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port + 1 + rank));
  must(::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a), "bind");
  must(::listen(ls, 4), "listen");
  int right = must(::socket(AF_INET, SOCK_STREAM, 0), "socket");
  sockaddr_in ra = a;
  ra.sin_port = htons(static_cast<std::uint16_t>(port + 1 + (rank + 1) % p));
  for (int tries = 0; ::connect(right, reinterpret_cast<sockaddr*>(&ra), sizeof ra) != 0; ++tries) {
    if (tries > 3000) must(-1, "connect");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int left = must(::accept(ls, nullptr, nullptr), "accept");
  ::close(ls);
  ::setsockopt(right, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(left, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  std::size_t chunk = std::size_t(1) << 20;  // the same pipelining chunk as asio_tcp's rows
  if (const char* e = std::getenv("PACO_BENCH_CHUNK")) chunk = std::strtoull(e, nullptr, 10);
  for (std::size_t bytes : bench::sizes(max_bytes)) {
    std::size_t seg = (bytes + p - 1) / p, steps = 2 * static_cast<std::size_t>(p - 1);
    std::vector<char> src(seg * steps, 1), dst(seg * steps);
    int iters = bench::iterations(bytes);
    std::vector<double> secs, cpu;
    for (int it = -2; it < iters; ++it) {
      char tok = 0;  // barrier: a token twice around the ring
      for (int k = 0; k < 2; ++k) {
        if (rank == 0) {
          send_all(right, &tok, 1);
          recv_all(left, &tok, 1);
        } else {
          recv_all(left, &tok, 1);
          send_all(right, &tok, 1);
        }
      }
      std::atomic<std::size_t> got{0};
      double c0 = bench::cpu_seconds();
      auto t0 = clk::now();
      std::thread sender([&] {
        for (std::size_t s = 0; s < steps; ++s)
          for (std::size_t c = 0; c < seg; c += chunk) {
            std::size_t m = std::min(chunk, seg - c);
            if (s > 0) {  // chunk c of step s-1 must have arrived
              std::size_t need = (s - 1) * seg + c + m;
              for (std::size_t g = got.load(); g < need; g = got.load()) got.wait(g);
            }
            send_all(right, src.data() + s * seg + c, m);
          }
      });
      for (std::size_t s = 0; s < steps; ++s)
        for (std::size_t c = 0; c < seg; c += chunk) {
          std::size_t m = std::min(chunk, seg - c);
          recv_all(left, dst.data() + s * seg + c, m);
          got.store(s * seg + c + m);
          got.notify_one();
        }
      sender.join();
      double s = secs_since(t0);
      double c = bench::cpu_seconds() - c0;
      if (it >= 0) {
        secs.push_back(s);
        cpu.push_back(c);
      }
    }
    if (rank == 0) bench::print_row("raw_ring", bytes, p, secs, cpu);
  }
  ::close(left);
  ::close(right);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s asio|raw RANK SIZE PORT [MAX_BYTES]\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  int rank = std::atoi(argv[2]), p = std::atoi(argv[3]), port = std::atoi(argv[4]);
  std::size_t max_bytes = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : (std::size_t(64) << 20);
  if (mode == "asio") return run_asio(rank, p, port, max_bytes);
  if (mode == "raw") return run_raw(rank, p, port, max_bytes);
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
