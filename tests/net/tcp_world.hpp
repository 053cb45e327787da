#pragma once
// A test world of asio_tcp endpoints on 127.0.0.1, one thread per rank, coordinator rendezvous
// on a port the OS just handed out.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "paco/net/asio_tcp.hpp"
#include "paco/net/free_port.hpp"

namespace paco::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int free_port() {
  return net::free_loopback_port();
}

inline net::tcp_options loopback_options(int rank, int size, int port) {
  net::tcp_options o;
  o.rank = rank;
  o.size = size;
  o.coordinator = "127.0.0.1:" + std::to_string(port);
  o.token = "test-token";
  o.connect_timeout = std::chrono::seconds(10);
  o.heartbeat_interval = std::chrono::milliseconds(100);
  o.peer_timeout = std::chrono::milliseconds(1500);
  o.allow_single = true;
  return o;
}

// Runs f(asio_tcp&) on p threads, rank r connected with options(r, p, port).
template <class Options, class F>
void run_tcp_ranks(const char* name, int p, Options options, F f) {
  int port = free_port();
  std::vector<std::thread> th;
  std::vector<std::string> err(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r)
    th.emplace_back([&, r] {
      auto t = net::asio_tcp::connect(options(r, p, port));
      if (!t) {
        err[static_cast<std::size_t>(r)] = t.error().what();
        return;
      }
      f(*t.value());
    });
  for (auto& t : th) t.join();
  for (auto& e : err)
    if (!e.empty()) throw std::runtime_error(std::string(name) + ": " + e);
}

struct tcp_world {
  using transport = net::asio_tcp;
  static constexpr const char* name = "asio_tcp";
  template <class F>
  static void run(int p, F f) {
    run_tcp_ranks("tcp_world", p, loopback_options, f);
  }
  static void kill(transport& t) { t.abort(); }
};

// tcp_world with every link striped over three TCP streams (tcp_options::streams).
struct striped_tcp_world {
  using transport = net::asio_tcp;
  static constexpr const char* name = "asio_tcp, 3 streams";
  template <class F>
  static void run(int p, F f) {
    run_tcp_ranks(
        "striped_tcp_world", p,
        [](int r, int n, int port) {
          auto o = loopback_options(r, n, port);
          o.streams = 3;
          return o;
        },
        f);
  }
  static void kill(transport& t) { t.abort(); }
};

}  // namespace paco::testing
