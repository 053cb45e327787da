// The DiPaCo store service over real TCP sockets (asio_tcp on 127.0.0.1, one thread per rank):
// the same run gives bit-identical modules over inproc and over asio_tcp; under every sync rule,
// the workers' run_worker through the service equals local_run's threads in this process.
#include <catch2/catch.hpp>

#include <mutex>
#include <string>

#include "../net/tcp_world.hpp"
#include "../store/service_case.hpp"

namespace {
// The service case over asio_tcp: a rank that cannot connect is reported by its error.
void over_tcp(std::optional<paco::train::sync_choice> rule = std::nullopt) {
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
      5, std::nullopt, rule);
  REQUIRE(connect_error.empty());
}
}  // namespace

TEST_CASE("DiPaCo 2x2 over asio_tcp equals the in-process run bit for bit",
          "[multiproc][service]") {
  over_tcp();
}

TEST_CASE("every sync rule through the store over asio_tcp equals local_run's, bit for bit",
          "[multiproc][service]") {
  using namespace paco::train;
  for (sync_choice rule : {sync_choice(blocking{}), sync_choice(co2{}), sync_choice(eager{}),
                           sync_choice(naive_delayed{}), sync_choice(streaming{}),
                           sync_choice(streaming{.overlap = 1, .alpha = 0.5f}),
                           sync_choice(co2_snapshot{.overlap = 1})}) {
    INFO(rule.name());
    over_tcp(rule);
  }
}
