// The module store as a service over a Transport (inproc threads here; the same code runs over
// asio_tcp between processes): identical results to the in-process store, and a worker that
// dies mid-run is left out while the others finish.
#include <catch2/catch.hpp>

#include <thread>

#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/sync/dipaco_local.hpp"
#include "paco/sync/store_service.hpp"
#include "service_case.hpp"

using namespace paco;
using paco::testing::dipaco_service_case;

TEST_CASE("DiPaCo 2x2 over the store service equals the in-process run bit for bit",
          "[dipaco][service]") {
  auto world = net::inproc::world(5);
  dipaco_service_case([&](int rank, auto&& body) { body(world[std::size_t(rank)]); }, 5);
}

TEST_CASE("a worker that dies is left out of the round; the others finish", "[dipaco][service]") {
  auto world = net::inproc::world(4);  // store + 3 DiLoCo workers on one module of 8 floats
  path::module_store<outer::sgd> store({{0, 8, 3}}, outer::sgd{.lr = 1.0f}, {.weight_by_shard = false});
  store.set(0, std::vector<float>(8, 1.0f));
  sync::store_server server(world[0], store, {{1, {0}}, {2, {0}}, {3, {0}}},
                            {.round_timeout = std::chrono::milliseconds(20000)});
  std::thread st([&] { server.serve(); });
  std::vector<status> errs(3);
  std::vector<std::thread> th;
  for (int w = 1; w <= 3; ++w)
    th.emplace_back([&, w] {
      sync::store_client c(world[w], sync::store_layout{{0}}, w);
      std::vector<float> theta(8);
      for (long r = 0; r < 2; ++r) {
        auto got = c.pull(0, theta);
        if (!got) return void(errs[w - 1] = got.error());
        if (w == 3 && r == 1) {  // worker 3 dies before pushing round 1
          world[3].close();
          return;
        }
        std::vector<float> d(8, float(w));
        if (auto s = c.push(0, w, got->round, d, 1.0); !s) return void(errs[w - 1] = s);
        if (auto s = c.wait_closed(0, got->round, net::after(std::chrono::seconds(20))); !s)
          return void(errs[w - 1] = s);
      }
      errs[w - 1] = c.bye();
    });
  for (auto& t : th) t.join();
  st.join();
  REQUIRE(errs[0].ok());
  REQUIRE(errs[1].ok());
  auto h = server.history();
  REQUIRE(h.size() == 2);
  REQUIRE(h[0].arrived == 3);
  REQUIRE(h[1].arrived == 2);  // the dead worker was left out, without waiting for the timeout
  std::vector<float> theta(8);
  store.pull(0, theta);
  // Round 0: Δ = mean(1,2,3) = 2 → θ = −1; round 1: Δ = mean(1,2) = 1.5 → θ = −2.5.
  for (float v : theta) REQUIRE(v == Approx(-2.5f));
}

TEST_CASE("star links: a worker that dies and reconnects rejoins the next round", "[dipaco][service]") {
  // Two workers, each on its own two-rank link to the store (store = rank 0 of each link).
  path::module_store<outer::sgd> store({{0, 4, 2}}, outer::sgd{.lr = 1.0f}, {.weight_by_shard = false});
  store.set(0, std::vector<float>(4, 0.0f));
  auto l1 = net::inproc::world(2), l2 = net::inproc::world(2);
  using link = sync::worker_link<net::inproc>;
  sync::store_server server(std::map<int, link>{{1, {&l1[0], 1}}, {2, {&l2[0], 1}}}, store,
                            {{1, {0}}, {2, {0}}}, {.round_timeout = std::chrono::milliseconds(20000)});
  server.expect_rejoins(true);
  std::thread st([&] { server.serve(); });
  auto round_trip = [&](net::inproc& end, int w, float d) -> status {
    sync::store_client c(std::map<int, link>{{0, {&end, 0}}}, sync::store_layout{{0}}, w);
    if (auto s = c.hello(); !s) return s;
    std::vector<float> th(4);
    auto got = c.pull(0, th);
    if (!got) return got.error();
    if (auto s = c.push(0, w, got->round, std::vector<float>(4, d), 1.0); !s) return s;
    return c.wait_closed(0, got->round, net::after(std::chrono::seconds(20)));
  };
  // Round 0: both push. Then worker 2 "crashes" (its link closes).
  status a, b;
  std::thread t1([&] { a = round_trip(l1[1], 1, 1.0f); });
  std::thread t2([&] { b = round_trip(l2[1], 2, 3.0f); });
  t1.join();
  t2.join();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  l2[1].close();
  // Round 1: worker 1 alone (worker 2 is dead, so the round closes with one push).
  REQUIRE(round_trip(l1[1], 1, 2.0f).ok());
  // Worker 2 restarts on a new link and joins round 2 with worker 1.
  auto l2b = net::inproc::world(2);
  server.attach(2, {&l2b[0], 1});
  std::thread t3([&] { a = round_trip(l1[1], 1, 1.0f); });
  std::thread t4([&] { b = round_trip(l2b[1], 2, 5.0f); });
  t3.join();
  t4.join();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  server.stop();
  st.join();
  auto h = server.history();
  REQUIRE(h.size() == 3);
  REQUIRE(h[0].arrived == 2);
  REQUIRE(h[1].arrived == 1);
  REQUIRE(h[2].arrived == 2);
  std::vector<float> th(4);
  store.pull(0, th);
  // θ = 0 − mean(1,3) − 2 − mean(1,5) = −7
  for (float v : th) REQUIRE(v == Approx(-7.0f));
}
