// The DiPaCo store service over real TCP sockets (asio_tcp on 127.0.0.1, one thread per rank):
// the same run gives bit-identical modules over inproc and over asio_tcp.
#include <catch2/catch.hpp>

#include <mutex>
#include <string>

#include "../net/tcp_world.hpp"
#include "../store/service_case.hpp"

TEST_CASE("DiPaCo 2x2 over asio_tcp equals the in-process run bit for bit",
          "[multiproc][service]") {
  const int port = paco::testing::free_port();
  std::mutex mu;
  std::string connect_error;  // Catch2 assertions stay on the main thread
  paco::testing::dipaco_service_case(
      [&](int rank, auto&& body) {
        auto t = paco::net::asio_tcp::connect(paco::testing::loopback_options(rank, 5, port));
        if (!t) {
          std::lock_guard lk(mu);
          connect_error = t.error().what();
          return;
        }
        body(*t.value());
        t.value()->close();
      },
      5);
  REQUIRE(connect_error.empty());
}
