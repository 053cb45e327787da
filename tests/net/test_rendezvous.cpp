// The coordinator rendezvous of a fixed-size group: a rank started twice stops the group, and
// every process taking part (the coordinator, the admitted member, the second claimant) gets an
// error naming the rank and both addresses.
#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#include "tcp_world.hpp"

using namespace paco;
using namespace std::chrono_literals;

TEST_CASE("asio_tcp rendezvous: a rank started twice stops every process of the group",
          "[net][rendezvous]") {
  const int port = testing::free_port();
  // A group of 3: the coordinator, rank 1 twice, rank 2 never (so the group cannot form before
  // the second rank 1 arrives).
  std::vector<std::string> err(3);
  std::vector<std::error_code> code(3);
  std::vector<std::thread> th;
  for (int i = 0; i < 3; ++i)
    th.emplace_back([&, i] {
      if (i == 2) std::this_thread::sleep_for(300ms);  // the second rank 1, once the first is in
      auto o = testing::loopback_options(i == 0 ? 0 : 1, 3, port);
      o.connect_timeout = 10s;
      auto t = net::asio_tcp::connect(o);
      if (!t) {
        err[std::size_t(i)] = t.error().message;
        code[std::size_t(i)] = t.error().code;
      }
    });
  for (auto& t : th) t.join();
  INFO("coordinator: " << err[0] << "\nrank 1: " << err[1] << "\nrank 1 again: " << err[2]);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(code[std::size_t(i)] == errc::mismatch);
    REQUIRE(err[std::size_t(i)].find("rank 1 was started twice (from 127.0.0.1:") !=
            std::string::npos);
  }
  REQUIRE(err[1].find("the coordinator stopped the group") != std::string::npos);
}
