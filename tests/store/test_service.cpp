// The module store as a service over a Transport (inproc threads here; the same code runs over
// asio_tcp between processes): identical results to the in-process store, and a worker that
// dies mid-run is left out while the others finish.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <thread>

#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/store/store.hpp"
#include "paco/train/dipaco_local.hpp"
#include "service_case.hpp"

using namespace paco;
using namespace std::chrono_literals;
using paco::testing::dipaco_service_case;

TEST_CASE("DiPaCo 2x2 over the store service equals the in-process run bit for bit",
          "[dipaco][service]") {
  auto world = net::inproc::world(5);
  dipaco_service_case([&](int rank, auto&& body) { body(world[std::size_t(rank)]); }, 5);
}

TEST_CASE("a worker that dies is left out of the round; the others finish", "[dipaco][service]") {
  auto world = net::inproc::world(4);  // store + 3 DiLoCo workers on one module of 8 floats
  store::module_store<outer::sgd> store({{0, 8, 3}}, outer::sgd{.lr = 1.0f},
                                        {.weight_by_shard = false});
  store.set(0, std::vector<float>(8, 1.0f));
  store::server server(world[0], store, {{1, {0}}, {2, {0}}, {3, {0}}},
                       {.round_timeout = std::chrono::milliseconds(20000)});
  std::thread st([&] { server.serve(); });
  std::vector<status> errs(3);
  std::vector<std::thread> th;
  for (int w = 1; w <= 3; ++w)
    th.emplace_back([&, w] {
      store::client c(world[w], store::store_layout{{0}}, w);
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

TEST_CASE("star links: a worker that dies and reconnects rejoins the next round",
          "[dipaco][service]") {
  // Two workers, each on its own two-rank link to the store (store = rank 0 of each link).
  store::module_store<outer::sgd> store({{0, 4, 2}}, outer::sgd{.lr = 1.0f},
                                        {.weight_by_shard = false});
  store.set(0, std::vector<float>(4, 0.0f));
  auto l1 = net::inproc::world(2), l2 = net::inproc::world(2);
  using link = store::worker_link<net::inproc>;
  store::server server(std::map<int, link>{{1, {&l1[0], 1}}, {2, {&l2[0], 1}}}, store,
                       {{1, {0}}, {2, {0}}}, {.round_timeout = std::chrono::milliseconds(20000)});
  server.expect_rejoins(true);
  std::thread st([&] { server.serve(); });
  auto round_trip = [&](net::inproc& end, int w, float d) -> status {
    store::client c(std::map<int, link>{{0, {&end, 0}}}, store::store_layout{{0}}, w);
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

TEST_CASE("a partner that dies after its push does not close the round before the live partner's",
          "[dipaco][service]") {
  auto world = net::inproc::world(3);  // store + 2 workers through one module of 4 floats
  store::module_store<outer::sgd> store({{0, 4, 2}}, outer::sgd{.lr = 1.0f},
                                        {.weight_by_shard = false});
  store.set(0, std::vector<float>(4, 1.0f));
  store::server server(world[0], store, {{1, {0}}, {2, {0}}},
                       {.round_timeout = std::chrono::milliseconds(20000)});
  std::thread st([&] { server.serve(); });
  status s1, s2;
  std::thread t1([&] {
    store::client c(world[1], store::store_layout{{0}}, 1);
    std::vector<float> theta(4);
    auto got = c.pull(0, theta);
    if (!got) return void(s1 = got.error());
    s1 = c.push(0, 1, got->round, std::vector<float>(4, 1.0f), 1.0);
    world[1].close();  // worker 1 dies right after its push
  });
  std::thread t2([&] {
    store::client c(world[2], store::store_layout{{0}}, 2);
    std::vector<float> theta(4);
    auto got = c.pull(0, theta);
    if (!got) return void(s2 = got.error());
    t1.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the store saw the death
    s2 = c.push(0, 2, got->round, std::vector<float>(4, 3.0f), 1.0);
    if (s2) s2 = c.wait_closed(0, got->round, net::after(std::chrono::seconds(20)));
    c.bye();
  });
  t2.join();
  st.join();
  REQUIRE(s1.ok());
  REQUIRE(s2.ok());  // the on-time push of the live partner was taken
  REQUIRE(server.ontime_refused() == 0);
  auto h = server.history();
  REQUIRE(h.size() == 1);
  REQUIRE(h[0].arrived == 2);  // the dead worker's push was kept
  REQUIRE_FALSE(h[0].by_deadline);
  std::vector<float> theta(4);
  store.pull(0, theta);
  for (float v : theta) REQUIRE(v == Approx(1.0f - 2.0f));  // θ − mean(1, 3)
}

TEST_CASE("a quorum closes rounds without the slow worker, and its late push is merged",
          "[dipaco][service]") {
  // Store + 2 workers through one module of 2 floats; outer SGD at rate 1; quorum 1, no grace;
  // a push one round late is merged at weight ½.
  auto world = net::inproc::world(3);
  store::module_store<outer::sgd> store({{0, 2, 2}}, outer::sgd{.lr = 1.0f},
                                        {.weight_by_shard = false});
  store.merge_late(1);
  store.set(0, std::vector<float>{10, 20});
  store::server server(
      world[0], store, {{1, {0}}, {2, {0}}},
      {.round_timeout = std::chrono::milliseconds(20000), .quorum = 1, .grace = 0});
  const auto t0 = std::chrono::steady_clock::now();
  std::thread st([&] { server.serve(); });
  status s1, s2;
  long merged1 = -1, merged2 = -1;  // each worker's count of its pushes merged late
  double pace1 = -1;                // the fast worker's push pace, from its last wait reply
  std::atomic<int> step{0};
  const auto until = [] { return net::after(std::chrono::seconds(20)); };
  std::thread t1([&] {  // the fast worker
    store::client c(world[1], store::store_layout{{0}}, 1);
    s1 = c.push(0, 1, 0, std::vector<float>{1, 2}, 1.0);  // closes round 0 (quorum 1)
    if (s1) s1 = c.wait_closed(0, 0, until());
    while (s1 && step.load() < 1) std::this_thread::yield();      // the slow push is in round 1
    if (s1) s1 = c.push(0, 1, 1, std::vector<float>{3, 0}, 1.0);  // closes round 1
    if (s1) s1 = c.wait_closed(0, 1, until());
    merged1 = c.merged_late();
    pace1 = c.push_time_s(0);
    c.bye();
  });
  std::thread t2([&] {  // the slow worker: its push from round 0 comes after round 0 closed
    store::client c(world[2], store::store_layout{{0}}, 2);
    s2 = c.wait_closed(0, 0, until());
    if (s2) s2 = c.push(0, 2, 0, std::vector<float>{6, 3}, 1.0);  // merged into round 1
    step = 1;
    if (s2) s2 = c.wait_closed(0, 1, until());
    merged2 = c.merged_late();
    c.bye();
  });
  t1.join();
  t2.join();
  st.join();
  REQUIRE(s1.ok());
  REQUIRE(s2.ok());
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(took < std::chrono::seconds(10));  // neither round waited for its deadline (20 s)
  const auto h = server.history();
  REQUIRE(h.size() == 2);
  REQUIRE(h[0].by_quorum);
  REQUIRE(h[0].arrived == 1);
  REQUIRE(h[1].by_quorum);
  REQUIRE(h[1].arrived == 2);
  REQUIRE(h[1].late_merged == 1);
  REQUIRE_FALSE(h[1].by_deadline);
  REQUIRE(server.late_merged() == 1);
  REQUIRE(server.late_refused() == 0);
  // The workers know which of their pushes were merged late (the fast one's pushes closed their
  // rounds on time, though the store's round had moved on when it replied).
  REQUIRE(merged1 == 0);
  REQUIRE(merged2 == 1);
  // The wait replies carry the store's push pace (on-time pushes only: the fast worker's).
  REQUIRE(server.push_time_s(0) > 0);
  REQUIRE(pace1 == Approx(server.push_time_s(0)).margin(1e-6));
  // θ1 = (10, 20) − (1, 2) = (9, 18); θ2 = θ1 − (1·(3, 0) + ½·(6, 3)) / 1.5 = (5, 17).
  std::vector<float> theta(2);
  store.pull(0, theta);
  REQUIRE(theta[0] == Approx(5.0f).epsilon(1e-6));
  REQUIRE(theta[1] == Approx(17.0f).epsilon(1e-6));
}

TEST_CASE("DiPaCo 2x2 with a 4x slow worker: rounds close on a quorum, its late work is merged",
          "[dipaco][service]") {
  // Each module has two paths through it; quorum 1 with no grace closes a round as soon as one
  // of them pushed, so the slow worker's modules may sit at different rounds (it pulls them as
  // they are) and its pushes, up to 2 rounds behind, are merged at weight 1/(1+s).
  auto world = net::inproc::world(testing::service_setup::ranks);
  testing::service_setup s;
  s.store.merge_late(2);
  s.server_opts = {.round_timeout = std::chrono::milliseconds(20000),
                   .rounds = testing::service_setup::rounds,
                   .quorum = 1,
                   .grace = 0};
  s.tune = [](train::worker_loop_options& o, int p) {
    o.mixed_rounds = true;
    if (p == 3) o.throttle = 4;
  };
  std::vector<status> errs(testing::service_setup::ranks);
  std::vector<std::thread> th;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < testing::service_setup::ranks; ++r)
    th.emplace_back([&, r] { errs[std::size_t(r)] = s.run_rank(world[std::size_t(r)], r); });
  for (auto& t : th) t.join();
  for (auto& e : errs) REQUIRE(e.ok());
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
  for (int m = 0; m < 4; ++m) REQUIRE(s.store.round(m) == testing::service_setup::rounds);
  long quorum = 0, merged = 0;
  for (const auto& h : s.store_history) {
    REQUIRE_FALSE(h.by_deadline);  // no round waited for its deadline
    quorum += h.by_quorum;
    merged += h.late_merged;
  }
  INFO("rounds closed by quorum " << quorum << ", late pushes merged " << merged);
  REQUIRE(s.store_history.size() == 4 * testing::service_setup::rounds);
  REQUIRE(quorum > 0);
  REQUIRE(merged > 0);  // the slow worker's work reached the model (4 to 6 of its pushes here)
}

TEST_CASE("a rejoining worker pulls its path at one round although a module of it lagged",
          "[dipaco][service]") {
  // Module 0 is shared by workers 1 and 2; module 1 is worker 1's own, module 2 worker 2's.
  store::module_store<outer::sgd> store({{0, 4, 2}, {1, 4, 1}, {2, 4, 1}}, outer::sgd{.lr = 1.0f},
                                        {.weight_by_shard = false});
  for (int m = 0; m < 3; ++m) store.set(m, std::vector<float>(4, 0.0f));
  auto l1 = net::inproc::world(2), l2 = net::inproc::world(2);
  using link = store::worker_link<net::inproc>;
  store::server server(std::map<int, link>{{1, {&l1[0], 1}}, {2, {&l2[0], 1}}}, store,
                       {{1, {0, 1}}, {2, {0, 2}}},
                       {.round_timeout = std::chrono::milliseconds(20000)});
  server.expect_rejoins(true);
  std::thread st([&] { server.serve(); });
  struct stop_at_exit {  // a failed REQUIRE must not leave the serving thread running
    std::function<void()> f;
    ~stop_at_exit() { f(); }
  } stopper{[&] {
    server.stop();
    if (st.joinable()) st.join();
  }};
  auto round_trip = [&](net::inproc& end, int w, std::vector<int> mods, long* at) -> status {
    store::client c(std::map<int, link>{{0, {&end, 0}}}, store::store_layout{{0}}, w);
    if (auto s = c.hello(); !s) return s;
    std::vector<float> th(4);
    std::vector<long> rounds;
    for (int m : mods) {
      auto got = c.pull(m, th);
      if (!got) return got.error();
      rounds.push_back(got->round);
    }
    if (rounds.front() != rounds.back())
      return {errc::mismatch, "modules at rounds " + std::to_string(rounds.front()) + " and " +
                                  std::to_string(rounds.back())};
    if (at) *at = rounds.front();
    for (int m : mods)
      if (auto s = c.push(m, w, rounds.front(), std::vector<float>(4, 1.0f), 1.0); !s) return s;
    for (int m : mods)
      if (auto s = c.wait_closed(m, rounds.front(), net::after(std::chrono::seconds(20))); !s)
        return s;
    return {};
  };
  status a, b;
  std::thread t1([&] { a = round_trip(l1[1], 1, {0, 1}, nullptr); });
  std::thread t2([&] { b = round_trip(l2[1], 2, {0, 2}, nullptr); });
  t1.join();
  t2.join();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  l2[1].close();  // worker 2 dies; module 2 has no live worker and stays at round 1
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int r = 1; r <= 3; ++r) REQUIRE(round_trip(l1[1], 1, {0, 1}, nullptr).ok());
  REQUIRE(store.round(0) == 4);
  REQUIRE(store.round(2) == 1);
  // Worker 2 restarts: its modules sit at rounds 4 and 1; it must still pull one round.
  auto l2b = net::inproc::world(2);
  server.attach(2, {&l2b[0], 1});
  long joined = -1;
  std::thread t3([&] { a = round_trip(l1[1], 1, {0, 1}, nullptr); });
  std::thread t4([&] { b = round_trip(l2b[1], 2, {0, 2}, &joined); });
  t3.join();
  t4.join();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(joined == 4);
  stopper.f();
  REQUIRE(store.round(0) == 5);
  REQUIRE(store.round(2) == 5);
  REQUIRE(server.ontime_refused() == 0);
  // Round 4 of module 0 took both pushes: the rejoined worker was not left out.
  int both = 0;
  for (auto& h : server.history())
    if (h.module == 0 && h.round == 4) both = h.arrived;
  REQUIRE(both == 2);
}

TEST_CASE("module_store refuses pushes with a NaN, zero, negative or absurd shard weight",
          "[dipaco][service]") {
  store::module_store<outer::sgd> store({{0, 4, 2}}, outer::sgd{.lr = 1.0f});
  store.set(0, std::vector<float>(4, 1.0f));
  const std::vector<float> d(4, 1.0f);
  for (double w : {std::nan(""), 0.0, -1.0, 1e300, std::numeric_limits<double>::infinity(),
                   store::max_push_weight * 2}) {
    INFO("weight " << w);
    auto s = store.push(0, 1, 0, d, w);
    REQUIRE_FALSE(s.ok());
    REQUIRE(s.error().code == errc::invalid_argument);
    REQUIRE(store.pushed(0) == 0);
  }
  REQUIRE(store.push(0, 1, 1, d, 1.0).error().code == errc::mismatch);  // round out of range
  REQUIRE(store.push(0, 1, -1, d, 1.0).error().code == errc::mismatch);
  REQUIRE(store.push(5, 1, 0, d, 1.0).error().code == errc::invalid_argument);  // no module 5
  REQUIRE(store.push(-1, 1, 0, d, 1.0).error().code == errc::invalid_argument);
  REQUIRE(store.push(0, 1, 0, std::vector<float>(3, 1.0f), 1.0).error().code ==
          errc::invalid_argument);
  REQUIRE(store.push(0, 1, 0, d, 1.0).ok());
  REQUIRE(store.push(0, 2, 0, d, 1e6).ok());
  store.close(0);
  std::vector<float> theta(4);
  store.pull(0, theta);
  for (float v : theta) REQUIRE(std::isfinite(v));
}

TEST_CASE("after a store restart a worker whose modules sit at different rounds joins at once",
          "[dipaco][service]") {
  // The store's checkpoint was written between two closes: worker 2's own module 2 closed round
  // 3, the shared module 0 had not. Worker 2 (resumed from round 2) cannot pull one round until
  // module 0 closes round 3, which must not wait for it.
  store::module_store<outer::sgd> store({{0, 4, 2}, {1, 4, 1}, {2, 4, 1}}, outer::sgd{.lr = 1.0f},
                                        {.weight_by_shard = false});
  for (int m = 0; m < 3; ++m) {
    auto snap = store.save(m);
    snap.round = m == 2 ? 4 : 3;
    REQUIRE(store.restore(m, snap).ok());
  }
  using link = store::worker_link<net::inproc>;
  store::server server(std::map<int, link>{}, store, {{1, {0, 1}}, {2, {0, 2}}},
                       {.round_timeout = std::chrono::milliseconds(20000)});
  server.expect_rejoins(true);
  auto l1 = net::inproc::world(2), l2 = net::inproc::world(2);
  server.attach(1, {&l1[0], 1});
  server.attach(2, {&l2[0], 1});
  std::thread st([&] { server.serve(); });
  auto work = [&](net::inproc& end, int w, std::vector<int> mods, int rounds,
                  std::vector<long>* pulled) -> status {
    store::client c(std::map<int, link>{{0, {&end, 0}}}, store::store_layout{{0}}, w);
    if (auto s = c.hello(); !s) return s;
    std::vector<float> th(4);
    for (int i = 0; i < rounds; ++i) {
      long r0 = -1, r1 = -2;
      for (int tries = 0; tries < 250 && r0 != r1; ++tries) {  // as paco_train's worker retries
        if (tries) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        auto a = c.pull(mods[0], th), b = c.pull(mods[1], th);
        if (!a || !b) return {errc::peer_lost, "pull failed"};
        r0 = a->round, r1 = b->round;
      }
      if (r0 != r1)
        return {errc::mismatch,
                "modules at rounds " + std::to_string(r0) + ", " + std::to_string(r1)};
      if (pulled) pulled->push_back(r0);
      for (int m : mods)
        if (auto s = c.push(m, w, r0, std::vector<float>(4, 1.0f), 1.0); !s) return s;
      for (int m : mods)
        if (auto s = c.wait_closed(m, r0, net::after(std::chrono::seconds(10))); !s) return s;
    }
    return c.bye();
  };
  status a, b;
  std::vector<long> got;
  std::thread t1([&] { a = work(l1[1], 1, {0, 1}, 2, nullptr); });
  std::thread t2([&] { b = work(l2[1], 2, {0, 2}, 1, &got); });
  t1.join();
  t2.join();
  server.stop();
  st.join();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(got == std::vector<long>{4});
  int arrived3 = -1, arrived4 = -1;
  for (auto& h : server.history())
    if (h.module == 0) {
      if (h.round == 3) arrived3 = h.arrived;
      if (h.round == 4) arrived4 = h.arrived;
      REQUIRE_FALSE(h.by_deadline);
    }
  REQUIRE(arrived3 == 1);  // worker 1 alone, without waiting for the deadline
  REQUIRE(arrived4 == 2);
  REQUIRE(server.ontime_refused() == 0);
}

TEST_CASE("a store with a last round closes nothing past it and ends when it is reached",
          "[dipaco][service]") {
  // Before server_options::rounds a store kept closing empty rounds by deadline for as long as it
  // ran (a resumed store behind its workers reached round 58 of 12) and never ended by itself.
  auto world = net::inproc::world(2);  // store + 1 worker on one module of 4 floats
  store::module_store<outer::sgd> store({{0, 4, 1}}, outer::sgd{.lr = 1.0f},
                                        {.weight_by_shard = false});
  store.set(0, std::vector<float>(4, 0.0f));
  store::server server(world[0], store, {{1, {0}}},
                       {.round_timeout = std::chrono::milliseconds(30),
                        .io_timeout = std::chrono::milliseconds(2000),
                        .rounds = 2});
  server.expect_rejoins(true);  // without a last round this store would serve forever
  std::thread st([&] { server.serve(); });
  status pushed_late;
  {
    store::client c(world[1], store::store_layout{{0}}, 1);
    std::vector<float> theta(4);
    // The worker sleeps through both rounds: they close empty by deadline, then no more.
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    auto got = c.pull(0, theta);
    REQUIRE(got.ok());
    REQUIRE(got->round == 2);
    pushed_late = c.push(0, 1, 2, std::vector<float>(4, 1.0f), 1.0);
    REQUIRE(c.bye().ok());
  }
  st.join();  // returns by itself: every module reached round 2
  REQUIRE(store.round(0) == 2);
  REQUIRE(server.history().size() == 2);
  REQUIRE(!pushed_late.ok());  // a push past the last round is refused, θ unchanged
  std::vector<float> theta(4);
  store.pull(0, theta);
  for (float v : theta) REQUIRE(v == 0.0f);
}

namespace {

// An inproc endpoint whose replies (wire::reply_tag) fail with peer_lost once failing is set: a
// worker's link that died between its wait and the round's close, as after a store stall.
class failing_replies {
 public:
  struct request {
    net::inproc::request r;
    std::error_code failed;
    std::error_code wait() { return failed ? failed : r.wait(); }
    bool test() { return failed || r.test(); }
    void cancel() { r.cancel(); }
  };
  explicit failing_replies(net::inproc& t) : t_(&t) {}
  int rank() const { return t_->rank(); }
  int size() const { return t_->size(); }
  request send(int peer, net::tag_t tag, std::span<const std::byte> b, net::deadline d) {
    if (failing && tag == store::wire::reply_tag) return {{}, make_error_code(errc::peer_lost)};
    return {t_->send(peer, tag, b, d), {}};
  }
  request recv(int peer, net::tag_t tag, std::span<std::byte> b, net::deadline d) {
    return {t_->recv(peer, tag, b, d), {}};
  }
  void cancel_all() { t_->cancel_all(); }
  std::atomic<bool> failing{false};

 private:
  net::inproc* t_;
};
static_assert(net::Transport<failing_replies>);

// Workers 1..4 share module 0; 1, 2 and 3 push round 0 and wait for it (in that order), then
// `failing`'s reply link fails and worker 4's push closes the round: the store answers the three
// waits at once and one reply fails. Every other wait must be answered, the failed worker left
// out of round 1, and the store go on serving.
void replies_fail_at(int failing) {
  store::module_store<outer::sgd> store({{0, 4, 4}}, outer::sgd{.lr = 1.0f},
                                        {.weight_by_shard = false});
  store.set(0, std::vector<float>(4, 0.0f));
  std::vector<std::vector<net::inproc>> ends;
  std::vector<std::unique_ptr<failing_replies>> sides;
  using link = store::worker_link<failing_replies>;
  std::map<int, link> links;
  for (int w = 1; w <= 4; ++w) {
    ends.push_back(net::inproc::world(2));
    sides.push_back(std::make_unique<failing_replies>(ends.back()[0]));
    links[w] = {sides.back().get(), 1};
  }
  store::server server(links, store, {{1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}},
                       {.round_timeout = std::chrono::milliseconds(60000),
                        .io_timeout = std::chrono::milliseconds(2000)});
  std::thread st([&] { server.serve(); });
  struct stop_at_exit {  // a failed REQUIRE still stops and joins the serving thread
    std::function<void()> f;
    ~stop_at_exit() { f(); }
  } stopper{[&] {
    server.stop();
    if (st.joinable()) st.join();
  }};
  using client_link = store::worker_link<net::inproc>;
  std::vector<std::unique_ptr<store::client<net::inproc>>> clients;
  for (int w = 1; w <= 4; ++w)
    clients.push_back(std::make_unique<store::client<net::inproc>>(
        std::map<int, client_link>{{0, {&ends[std::size_t(w - 1)][1], 0}}},
        store::store_layout{{0}}, w));
  for (int w = 1; w <= 3; ++w)
    REQUIRE(clients[std::size_t(w - 1)]->push(0, w, 0, std::vector<float>(4, 1.0f), 1.0).ok());
  // The waits, sent in order from this one thread (inproc delivers at send), then the failure.
  for (int w = 1; w <= 3; ++w) {
    store::wire::request rq{std::uint32_t(store::wire::kind::wait), 0, 0, w, 0, 0, 0};
    REQUIRE_FALSE(ends[std::size_t(w - 1)][1]
                      .send(0, store::wire::request_tag, store::wire::bytes_of(rq), net::after(2s))
                      .wait());
  }
  std::this_thread::sleep_for(200ms);  // the store took the three waits (its loop polls)
  sides[std::size_t(failing - 1)]->failing = true;
  REQUIRE(clients[3]->push(0, 4, 0, std::vector<float>(4, 5.0f), 1.0).ok());
  for (int w = 1; w <= 3; ++w) {
    if (w == failing) continue;
    store::wire::reply rp{};
    INFO("worker " << w << "'s wait, with worker " << failing << "'s reply failing");
    REQUIRE_FALSE(ends[std::size_t(w - 1)][1]
                      .recv(0, store::wire::reply_tag, store::wire::bytes_of(rp), net::after(5s))
                      .wait());
    REQUIRE(rp.status == 0);
    REQUIRE(rp.round == 1);
  }
  // Round 1 closes with the three live workers, without the failed one and without a deadline.
  for (int w = 1; w <= 4; ++w)
    if (w != failing)
      REQUIRE(clients[std::size_t(w - 1)]->push(0, w, 1, std::vector<float>(4, 1.0f), 1.0).ok());
  REQUIRE(clients[0]->wait_closed(0, 1, net::after(5s)).ok());
  stopper.f();
  const auto h = server.history();
  REQUIRE(h.size() == 2);
  REQUIRE(h[0].arrived == 4);
  REQUIRE(h[1].arrived == 3);
  REQUIRE_FALSE(h[1].by_deadline);
  std::vector<float> theta(4);
  store.pull(0, theta);
  for (float v : theta) REQUIRE(v == -3.0f);  // θ = 0 − mean(1, 1, 1, 5) − mean(1, 1, 1)
}

}  // namespace

TEST_CASE("a reply to a wait that fails mid-list or at its end loses no other wait",
          "[dipaco][service]") {
  // The store walked its waits and, when a reply failed, dropped the dead worker's waits from
  // the list it was walking: the next worker's wait was lost (failure mid-list), or the walk ran
  // past the list's end (failure at its end), corrupting the store's heap.
  SECTION("mid-list") {
    replies_fail_at(2);
  }
  SECTION("at the end") {
    replies_fail_at(3);
  }
}

TEST_CASE("a worker and a store of different protocol versions refuse each other by name",
          "[store][service]") {
  const auto soon = [] { return net::after(std::chrono::seconds(20)); };
  {  // A worker of an older paco (its hello carries no version) is refused by a store.
    auto world = net::inproc::world(2);
    store::module_store<outer::sgd> store({{0, 2, 1}}, outer::sgd{.lr = 1.0f});
    store::server server(world[0], store, {{1, {0}}},
                         {.round_timeout = std::chrono::milliseconds(20000)});
    std::thread st([&] { server.serve(); });
    store::wire::request hello{std::uint32_t(store::wire::kind::hello), -1, 0, 1, 0, 0, 0};
    REQUIRE_FALSE(
        world[1].send(0, store::wire::request_tag, store::wire::bytes_of(hello), soon()).wait());
    store::wire::reply rp{};
    REQUIRE_FALSE(
        world[1].recv(0, store::wire::reply_tag, store::wire::bytes_of(rp), soon()).wait());
    CHECK(rp.status == int(errc::version));
    CHECK(rp.count == store::wire::protocol_version);
    store::client c(world[1], store::store_layout{{0}}, 1);  // this paco's worker is welcome
    REQUIRE(c.hello().ok());
    c.bye();
    st.join();
    REQUIRE(server.refusals().size() == 1);
    CHECK(server.refusals()[0].find("speaks store protocol 0, this store 2") != std::string::npos);
  }
  {  // A store of an older paco (its hello reply carries no version) is refused by a worker.
    auto world = net::inproc::world(2);
    std::thread old_store([&] {
      store::wire::request rq{};
      if (world[0].recv(1, store::wire::request_tag, store::wire::bytes_of(rq), soon()).wait())
        return;
      store::wire::reply rp{0, -1, 0, 0, 0};
      (void)world[0].send(1, store::wire::reply_tag, store::wire::bytes_of(rp), soon()).wait();
    });
    store::client c(world[1], store::store_layout{{0}}, 1);
    auto s = c.hello();
    old_store.join();
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code == make_error_code(errc::version));
    CHECK(s.error().message.find("store 0 speaks store protocol 0, this worker 2") !=
          std::string::npos);
  }
}
