#pragma once
// A test world of asio_tcp endpoints over TLS on 127.0.0.1: tcp_world's options plus the
// test PKI's member certificates (tls_pki.hpp). Needs a build with PACO_WITH_TLS.

#include "tcp_world.hpp"
#include "tls_pki.hpp"

namespace paco::testing {

inline net::tcp_options tls_loopback_options(int rank, int size, int port) {
  auto o = loopback_options(rank, size, port);
  o.tls = tls_member(rank);
  return o;
}

struct tls_world {
  using transport = net::asio_tcp;
  static constexpr const char* name = "asio_tcp+tls";
  template <class F>
  static void run(int p, F f) {
    run_tcp_ranks("tls_world", p, tls_loopback_options, f);
  }
  static void kill(transport& t) { t.abort(); }
};

}  // namespace paco::testing
