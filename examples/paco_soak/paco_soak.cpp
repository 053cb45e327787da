// paco_soak [MINUTES] [RANKS] [MBIT] [FLOATS]: all-reduces over asio_tcp links shaped to MBIT
// Mbit/s (paco's per-link token bucket) on 127.0.0.1, ranks as threads of this process, for
// MINUTES minutes; prints RSS at the start, every minute, and at the end. Not run in CI.
// Memory must stay flat: queues are bounded and the ring's scratch is reused.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "paco/collectives/collectives.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/free_port.hpp"

using namespace paco;

static long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string k;
  long v = 0;
  while (f >> k) {
    if (k == "VmRSS:") {
      f >> v;
      return v;
    }
    std::getline(f, k);
  }
  return -1;
}

int main(int argc, char** argv) {
  double minutes = argc > 1 ? std::atof(argv[1]) : 10.0;
  int p = argc > 2 ? std::atoi(argv[2]) : 4;
  double mbit = argc > 3 ? std::atof(argv[3]) : 100.0;
  std::size_t n = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : (std::size_t(1) << 20);
  int port = net::free_loopback_port();
  auto end = net::clock::now() + std::chrono::duration_cast<net::clock::duration>(
                                     std::chrono::duration<double>(minutes * 60));
  std::atomic<long> rounds{0};
  std::atomic<int> failures{0};
  long rss0 = 0;
  std::atomic<bool> started{false};
  std::vector<std::thread> th;
  for (int r = 0; r < p; ++r)
    th.emplace_back([&, r] {
      net::tcp_options o;
      o.rank = r;
      o.size = p;
      o.coordinator = "127.0.0.1:" + std::to_string(port);
      o.token = "soak";
      o.shaper.rate_bytes_per_s = mbit * 1e6 / 8;
      auto t = net::asio_tcp::connect(o);
      if (!t) {
        std::fprintf(stderr, "rank %d: %s\n", r, t.error().what().c_str());
        failures++;
        return;
      }
      std::vector<float> x(n);
      for (long k = 0;; ++k) {
        bool stop = net::clock::now() >= end;
        int go = stop ? 0 : 1;  // agree on stopping: an all-reduce of the votes
        if (!collectives::allreduce_ring(*t.value(), std::span<int>(&go, 1), {.tag = 1}).ok() ||
            go < p)
          break;
        for (std::size_t i = 0; i < n; ++i) x[i] = float(r + 1);
        auto st =
            collectives::allreduce_ring(*t.value(), std::span<float>(x),
                                        {.until = net::after(std::chrono::seconds(120)), .tag = 2});
        if (!st || x[n / 2] != float(p * (p + 1) / 2)) {
          std::fprintf(stderr, "rank %d: %s\n", r, st ? "wrong result" : st.error().what().c_str());
          failures++;
          break;
        }
        if (r == 0) {
          rounds++;
          if (k == 2) started = true;  // RSS baseline after warm-up
        }
      }
    });
  while (!started && failures == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  rss0 = rss_kib();
  auto t0 = net::clock::now();
  std::printf("soak: %d ranks, %.0f Mbit/s per link, %zu floats per all-reduce, %.1f min\n", p,
              mbit, n, minutes);
  std::printf("start RSS %ld KiB\n", rss0);
  std::fflush(stdout);
  auto next = t0 + std::chrono::minutes(1);
  long rss_last = rss0;
  while (net::clock::now() < end && failures == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (net::clock::now() + std::chrono::seconds(2) < end)
      rss_last = rss_kib();  // while every rank is still all-reducing
    if (net::clock::now() >= next) {
      std::printf("  %.1f min: RSS %ld KiB, %ld all-reduces\n",
                  std::chrono::duration<double>(net::clock::now() - t0).count() / 60, rss_kib(),
                  rounds.load());
      std::fflush(stdout);
      next += std::chrono::minutes(1);
    }
  }
  for (auto& t : th) t.join();
  long rss1 = rss_last;
  std::printf(
      "end RSS %ld KiB (last sample before shutdown); start %ld KiB, growth %+ld KiB; %ld "
      "all-reduces, %d failures\n",
      rss1, rss0, rss1 - rss0, rounds.load(), failures.load());
  return failures ? 1 : 0;
}
