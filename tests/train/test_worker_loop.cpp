// train/worker_loop.hpp: a worker's round loop against a shared store that refuses late pushes
// and whose modules may sit at different rounds.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/dipaco_local.hpp"
#include "paco/train/worker_loop.hpp"

using namespace paco;

namespace {
const train::inner_config icfg{
    .batch = 2,
    .ctx = 16,
    .steps = 3,
    .grad_clip = 1.0f,
    .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 1, .total = 100}};

// Two workers through one module (level 0 of a GPT cut in two levels), whose store takes
// `pushes` per round. Worker 1's shard holds `len1` tokens.
template <class O>
struct one_module {
  nn::gpt model{train_tests::small_gpt()};
  arena<host> a0{model.layout()};
  std::vector<path::level_span> levels = *path::split_gpt_levels(model.layout(), 2, 1);
  store::local_store<O> store;
  io::token_stream s0 = testing::synthetic_stream(1, 3000, 5, 3);
  io::token_stream s1;
  train::path_worker<nn::gpt, optim::adamw> w0, w1;
  one_module(int pushes, O outer, std::size_t len1 = 3000)
      : store({store::module_info{0, levels[0].size, pushes}}, outer),
        s1(testing::synthetic_stream(2, len1, 7, 3)),
        w0(0, model, levels, {0}, {}, icfg, s0, 1),
        w1(1, model, levels, {0}, {}, icfg, s1, 2) {
    model.init(a0, 2);
    const auto plan = *path::path_plan::make(path::module_grid<1>::experts({1}), levels, 2);
    train::init_modules(store, plan, a0.get(plane::param).data());
  }
};
// One path through two modules (a GPT cut in two levels, one expert each), its store holding
// the model's initial θ.
struct two_modules {
  nn::gpt model{train_tests::small_gpt()};
  arena<host> a0{model.layout()};
  path::path_plan plan = *path::path_plan::make(path::module_grid<2>::experts({1, 1}),
                                                *path::split_gpt_levels(model.layout(), 2, 2));
  store::local_store<outer::nesterov> store{plan.module_table(), outer::nesterov{}};
  two_modules() {
    model.init(a0, 3);
    train::init_modules(store, plan, a0.get(plane::param).data());
  }
};
// One path through one module (a GPT cut in two levels, one expert, one level as the module),
// its store holding the model's initial θ, and a worker of the path.
struct one_path {
  nn::gpt model{train_tests::small_gpt()};
  arena<host> a0{model.layout()};
  path::path_plan plan = *path::path_plan::make(path::module_grid<1>::experts({1}),
                                                *path::split_gpt_levels(model.layout(), 2, 1));
  store::local_store<outer::nesterov> store{plan.module_table(), outer::nesterov{}};
  io::token_stream s = testing::synthetic_stream(4, 3000, 5, 3);
  train::path_worker<nn::gpt, optim::adamw> w{
      0, model, plan.path_spans(0), plan.path_modules(0), {}, icfg, s, 1};
  one_path() {
    model.init(a0, 3);
    train::init_modules(store, plan, a0.get(plane::param).data());
  }
};
}  // namespace

TEST_CASE("run_worker: late pushes are refused and the worker goes on to the last round",
          "[train][worker_loop]") {
  // The store expects one push per round from two workers: whoever pushes second is late.
  one_module<outer::nesterov> f(1, outer::nesterov{});
  auto& store = f.store;
  auto &w0 = f.w0, &w1 = f.w1;
  std::atomic<int> done{0}, refused{0}, other_refusals{0};
  std::vector<long> rounds0;
  status r0, r1;
  const train::worker_loop_options o{.rounds = 6, .round_deadline = std::chrono::seconds(20)};
  std::thread t0([&] {
    r0 = train::run_worker(
        w0, store, o,
        [&](const train::worker_round& r) {
          ++done, rounds0.push_back(r.round);
          return status{};
        },
        [&](const error& e) {
          other_refusals += e.code != errc::mismatch;
          ++refused;
        });
  });
  std::thread t1([&] {
    r1 = train::run_worker(
        w1, store, o,
        [&](const train::worker_round&) {
          ++done;
          return status{};
        },
        [&](const error&) { ++refused; });
  });
  t0.join();
  t1.join();
  REQUIRE(other_refusals == 0);  // every refusal was a late push
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());
  REQUIRE(store.store().round(0) == 6);
  // Each round closed with exactly one push; every other push of the round was refused or was
  // for a round the worker pulled after it closed — no worker stopped early.
  for (auto& h : store.history()) REQUIRE(h.arrived == 1);
  REQUIRE(done + refused >= 6);
  REQUIRE(w0.round() == 6);
  REQUIRE(w1.round() == 6);
  for (std::size_t i = 1; i < rounds0.size(); ++i) REQUIRE(rounds0[i] > rounds0[i - 1]);
}

TEST_CASE("run_worker: a path whose modules stay at different rounds is an error after the tries",
          "[train][worker_loop]") {
  two_modules f;
  auto& model = f.model;
  auto& plan = f.plan;
  auto& store = f.store;
  // Module 1 runs a round ahead: a push from elsewhere closes its round 0.
  std::vector<float> d(plan.span_of(1).size, 0.0f);
  REQUIRE(store.push(1, 7, 0, d, 1.0).ok());
  REQUIRE(store.store().round(1) == 1);
  const auto s = testing::synthetic_stream(4, 3000, 5, 3);
  train::path_worker<nn::gpt, optim::adamw> w(0, model, plan.path_spans(0), plan.path_modules(0),
                                              {}, icfg, s, 1);
  const auto st = train::run_worker(
      w, store, {.rounds = 3, .pull_retry = std::chrono::milliseconds(1), .pull_tries = 5});
  REQUIRE(!st.ok());
  REQUIRE(st.error().code == errc::mismatch);
  REQUIRE(st.error().message.find("different rounds (module 0 at round 0, module 1 at round 1)") !=
          std::string::npos);
  // Once module 0 catches up (its round closes), the same worker runs to the end.
  REQUIRE(store.push(0, 7, 0, std::vector<float>(plan.span_of(0).size, 0.0f), 1.0).ok());
  int rounds = 0;
  REQUIRE(train::run_worker(w, store, {.rounds = 3}, [&](const train::worker_round&) {
            ++rounds;
            return status{};
          }).ok());
  REQUIRE(rounds == 2);  // rounds 1 and 2
  REQUIRE(store.store().round(0) == 3);
  REQUIRE(store.store().round(1) == 3);
}

TEST_CASE("run_worker: a path whose modules are far apart waits while they move together",
          "[train][worker_loop]") {
  // A restarted worker whose module 1 ran 10 rounds ahead while module 0's partner waited
  // (module 0 then closes one empty round per round deadline): the worker used to give up after
  // pull_tries however steadily module 0 caught up, and its run was broken beyond --resume.
  two_modules f;
  auto& model = f.model;
  auto& plan = f.plan;
  auto& store = f.store;
  const long ahead = 10;
  for (long r = 0; r < ahead; ++r)
    REQUIRE(store.push(1, 7, r, std::vector<float>(plan.span_of(1).size, 0.0f), 1.0).ok());
  // Module 0 closes a round every 100 ms; the worker gives up after 0.5 s of no change, so it
  // needs the 1 s module 0 takes to catch up only if it waits while the rounds move.
  std::atomic<int> partner_pushed{0};
  std::thread partner([&] {
    for (long r = 0; r < ahead; ++r) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      partner_pushed +=
          store.push(0, 7, r, std::vector<float>(plan.span_of(0).size, 0.0f), 1.0).ok();
    }
  });
  const auto s = testing::synthetic_stream(4, 3000, 5, 3);
  train::path_worker<nn::gpt, optim::adamw> w(0, model, plan.path_spans(0), plan.path_modules(0),
                                              {}, icfg, s, 1);
  int rounds = 0;
  const auto st = train::run_worker(
      w, store,
      {.rounds = ahead + 2, .pull_retry = std::chrono::milliseconds(5), .pull_tries = 100},
      [&](const train::worker_round&) {
        ++rounds;
        return status{};
      });
  partner.join();
  REQUIRE(partner_pushed == ahead);
  INFO((st.ok() ? std::string() : st.error().what()));
  REQUIRE(st.ok());
  REQUIRE(rounds == 2);  // it joined at round 10 and trained rounds 10 and 11
  REQUIRE(store.store().round(0) == ahead + 2);
  REQUIRE(store.store().round(1) == ahead + 2);
}

TEST_CASE("run_worker: a lockstep worker takes H steps for every round, closed without it or not",
          "[train][worker_loop]") {
  // The stages of a path must take the same steps: a round the store closed without one (while
  // it was down) is trained anyway, its Δ not pushed; a plain worker skips it.
  auto run = [](bool lockstep, long closed_before, long rounds) {
    one_path f;
    auto& store = f.store;
    auto& w = f.w;
    for (long r = 0; r < closed_before; ++r)  // another worker of the module closes them
      REQUIRE(store.push(0, 7, r, std::vector<float>(f.plan.span_of(0).size, 0.0f), 1.0).ok());
    std::vector<std::pair<long, bool>> reported;  // (round, pushed)
    const auto st = train::run_worker(w, store, {.rounds = rounds, .lockstep = lockstep},
                                      [&](const train::worker_round& r) {
                                        reported.push_back({r.round, r.pushed});
                                        return status{};
                                      });
    REQUIRE(st.ok());
    REQUIRE(store.store().round(0) == rounds);
    return std::pair{w.inner_step(), reported};
  };
  const long H = icfg.steps;
  using rounds_seen = std::vector<std::pair<long, bool>>;
  // Rounds 0–2 closed without the worker: it trains them too (reported as not pushed), then
  // rounds 3 and 4 with pushes.
  auto [steps, reported] = run(true, 3, 5);
  CHECK(steps == 5 * H);
  CHECK(reported == rounds_seen{{0, false}, {1, false}, {2, false}, {3, true}, {4, true}});
  // A plain worker joins at round 3.
  auto [plain_steps, plain] = run(false, 3, 5);
  CHECK(plain_steps == 2 * H);
  CHECK(plain == rounds_seen{{3, true}, {4, true}});
  // Every round closed without it: the rounds it owes, nothing pushed.
  auto [all_steps, none] = run(true, 5, 5);
  CHECK(all_steps == 5 * H);
  CHECK(none == rounds_seen{{0, false}, {1, false}, {2, false}, {3, false}, {4, false}});
  // Nothing closed without it: plain training, every round pushed.
  CHECK(run(true, 0, 3).second == rounds_seen{{0, true}, {1, true}, {2, true}});
  // Only the blocking rule keeps a lockstep.
  {
    two_modules f;
    const auto s = testing::synthetic_stream(4, 3000, 5, 3);
    train::path_worker<nn::gpt, optim::adamw> w(0, f.model, f.plan.path_spans(0),
                                                f.plan.path_modules(0), {}, icfg, s, 1);
    const auto st =
        train::run_worker(w, f.store, {.rounds = 2, .sync = train::co2{}, .lockstep = true});
    REQUIRE(!st.ok());
    CHECK(st.error().code == errc::unsupported);
  }
}

TEST_CASE("run_worker: a store behind the worker's checkpoint is an error, not a replay",
          "[train][worker_loop]") {
  // A store started anew (or from an older checkpoint) holds the path at round 0 while the
  // worker's checkpoint completed round 4: training on would silently throw rounds away.
  one_path f;
  auto& store = f.store;
  auto& w = f.w;
  const auto st = train::run_worker(w, store, {.rounds = 8, .completed = 4});
  REQUIRE(!st.ok());
  REQUIRE(st.error().code == errc::mismatch);
  REQUIRE(st.error().message.find("older than the worker's") != std::string::npos);
  REQUIRE(store.store().round(0) == 0);  // nothing was trained or pushed
  // An on_round error (a checkpoint that could not be written) ends the loop with it.
  const auto failed = train::run_worker(w, store, {.rounds = 3}, [](const train::worker_round&) {
    return status{errc::io, "disk full"};
  });
  REQUIRE(!failed.ok());
  REQUIRE(failed.error().message == "disk full");
  REQUIRE(store.store().round(0) == 1);  // one round closed, then the worker stopped
}

#include <unistd.h>
#include <filesystem>

#include "paco/train/worker_file.hpp"

#include "small_gpt.hpp"

TEST_CASE("worker_file: a worker resumes its step, moments and round from its checkpoint",
          "[train][worker_file]") {
  nn::gpt model(train_tests::small_gpt());
  const auto levels = *path::split_gpt_levels(model.layout(), 2, 1);
  const auto s = testing::synthetic_stream(5, 3000, 5, 3);
  train::path_worker<nn::gpt, optim::adamw> w(0, model, levels, {0}, {}, icfg, s, 1);
  model.init(w.state(), 3);
  w.train(4);
  const auto file = std::filesystem::temp_directory_path() /
                    ("paco_worker_" + std::to_string(::getpid()) + ".safetensors");
  const train::worker_identity me{.run = "r1", .worker = 3, .path = 1};
  REQUIRE(train::save_worker_file(file, model, w, 6, "cfg=1", me, {{"bytes_sent", "42"}}).ok());

  auto ck = train::load_worker_file(file, model, "cfg=1", me);
  REQUIRE(ck.ok());
  REQUIRE(ck->step == 4);
  REQUIRE(ck->round == 6);
  REQUIRE(ck->metadata.at("bytes_sent") == "42");
  auto c2 = icfg;
  c2.start_step = ck->step;
  train::path_worker<nn::gpt, optim::adamw> again(0, model, levels, {0}, {}, c2, s, 1);
  train::restore_worker_state(*ck, again);
  REQUIRE(again.inner_step() == 4);
  REQUIRE(again.position().sampler == w.position().sampler);  // the same batches from here on
  for (auto pl : {plane::moment1, plane::moment2}) {
    auto a = w.state().get(pl), b = again.state().get(pl);
    REQUIRE(std::equal(a.begin(), a.end(), b.begin()));
  }
  // Another configuration is refused, naming the file.
  auto other = train::load_worker_file(file, model, "cfg=2", me);
  REQUIRE(!other.ok());
  REQUIRE(other.error().message.find(file.string()) != std::string::npos);
  // So is the checkpoint of another run, or of another worker or path (files swapped).
  for (const train::worker_identity& who :
       {train::worker_identity{.run = "r2", .worker = 3, .path = 1},
        train::worker_identity{.run = "r1", .worker = 2, .path = 1},
        train::worker_identity{.run = "r1", .worker = 3, .path = 0}}) {
    auto wrong = train::load_worker_file(file, model, "cfg=1", who);
    REQUIRE(!wrong.ok());
    REQUIRE(wrong.error().code == errc::mismatch);
    REQUIRE(wrong.error().message.find(file.string()) != std::string::npos);
    REQUIRE(wrong.error().message.find(who.run == "r2" ? "another run" : "swapped") !=
            std::string::npos);
  }
  std::filesystem::remove(file);
}

TEST_CASE("push_weight: a round cut short weighs by the share of H it trained",
          "[train][worker_loop]") {
  // Two workers through one module, outer SGD at lr 1: the store steps by the weighted mean of
  // their Δ, computed here by hand from the arenas: worker 0 trained its H = 3 steps (weight:
  // its shard's tokens), worker 1 one of them (a third of its shard's tokens).
  one_module<outer::sgd> f(2, outer::sgd{.lr = 1.0f}, 2000);
  auto& store = f.store;
  auto &w0 = f.w0, &w1 = f.w1;
  const auto& a0 = f.a0;
  const auto& levels = f.levels;
  REQUIRE(train::pull(w0, store).ok());
  REQUIRE(train::pull(w1, store).ok());
  REQUIRE(w0.push_weight() == w0.shard_tokens());  // nothing trained yet: the whole shard
  w0.train();
  w1.train(1);
  REQUIRE(w0.push_weight() == w0.shard_tokens());
  REQUIRE(w1.push_weight() == w1.shard_tokens() / 3.0);
  const std::size_t o = levels[0].offset, n = levels[0].size;
  std::vector<float> want(n);
  const double wa = w0.shard_tokens(), wb = w1.shard_tokens() / 3.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double da = w0.state().get(plane::anchor)[o + i] - w0.state().get(plane::param)[o + i];
    const double db = w1.state().get(plane::anchor)[o + i] - w1.state().get(plane::param)[o + i];
    want[i] = float(a0.get(plane::param)[o + i] - (wa * da + wb * db) / (wa + wb));
  }
  REQUIRE(train::push(w0, store).ok());
  REQUIRE(train::push(w1, store).ok());
  std::vector<float> got(n);
  REQUIRE(store.wait_closed(0, 0, std::chrono::steady_clock::now() + std::chrono::seconds(5)).ok());
  store.pull(0, got);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == Approx(want[i]).margin(1e-6));
}

TEST_CASE("run_worker: a throttled worker within a train budget holds no round of its partner's",
          "[train][worker_loop]") {
  // Worker 1 runs 400 times slower; with a 30 ms budget a round it trains one step or so, and
  // both workers push every round: none is refused, every round closes with both.
  one_module<outer::nesterov> f(2, outer::nesterov{});
  auto& store = f.store;
  auto &w0 = f.w0, &w1 = f.w1;
  const int rounds = 4;
  std::atomic<int> refused{0};
  std::vector<train::worker_round> slow;
  status r0, r1;
  auto opts = [&](double throttle) {
    return train::worker_loop_options{.rounds = rounds,
                                      .round_deadline = std::chrono::seconds(20),
                                      .train_budget = std::chrono::milliseconds(30),
                                      .throttle = throttle};
  };
  std::thread t0(
      [&] { r0 = train::run_worker(w0, store, opts(1), {}, [&](const error&) { ++refused; }); });
  std::thread t1([&] {
    r1 = train::run_worker(
        w1, store, opts(400),
        [&](const train::worker_round& r) {
          slow.push_back(r);
          return status{};
        },
        [&](const error&) { ++refused; });
  });
  t0.join();
  t1.join();
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());
  REQUIRE(refused == 0);
  REQUIRE(slow.size() == std::size_t(rounds));            // every round of the slow worker closed
  REQUIRE(w1.inner_step() < long(rounds) * icfg.steps);   // … with fewer steps than H each
  REQUIRE(w1.inner_step() >= rounds);                     // (at least one a round)
  REQUIRE(w0.inner_step() == long(rounds) * icfg.steps);  // the fast one trained its H
}

TEST_CASE(
    "run_worker paced by measurement: a slow worker trains what fits its partner's pace; "
    "equal workers train H with the bits of an unpaced run",
    "[train][worker_loop]") {
  const int rounds = 4;
  const auto run = [&](one_module<outer::nesterov>& f, double throttle1, bool paced,
                       double factor) {
    std::atomic<int> refused{0};
    status r0, r1;
    auto opts = [&](double throttle) {
      return train::worker_loop_options{.rounds = rounds,
                                        .round_deadline = std::chrono::seconds(30),
                                        .throttle = throttle,
                                        .pace_measured = paced,
                                        .pace_factor = factor};
    };
    std::thread t0([&] {
      r0 = train::run_worker(f.w0, f.store, opts(1), {}, [&](const error&) { ++refused; });
    });
    std::thread t1([&] {
      r1 = train::run_worker(f.w1, f.store, opts(throttle1), {}, [&](const error&) { ++refused; });
    });
    t0.join();
    t1.join();
    REQUIRE(r0.ok());
    REQUIRE(r1.ok());
    REQUIRE(refused == 0);
  };
  SECTION("worker 1 400 times slower: after the first round, one step a round") {
    one_module<outer::nesterov> f(2, outer::nesterov{});
    run(f, 400, true, 1.05);
    // Round 0 before the store knows a pace: H steps; then the pace (worker 0's push, a few
    // milliseconds after the round opened) holds less than one of worker 1's steps: one each.
    // Worker 0 sets the pace and is never budgeted.
    CHECK(f.w1.inner_step() == icfg.steps + (rounds - 1));
    CHECK(f.w0.inner_step() == long(rounds) * icfg.steps);  // the fast one trained its H
    CHECK(f.store.push_time_s(0) > 0);
  }
  SECTION("equal workers: H steps every round and the same θ as without pacing") {
    // The faster of the two sets the pace and trains unbudgeted; the other, if it trained longer
    // than the pace, within 4 times it: equal workers sharing two cores with the store never
    // differ by that much, so no step is cut.
    one_module<outer::nesterov> paced(2, outer::nesterov{}), plain(2, outer::nesterov{});
    run(paced, 1, true, 4.0);
    run(plain, 1, false, 1.05);
    CHECK(paced.w0.inner_step() == long(rounds) * icfg.steps);
    CHECK(paced.w1.inner_step() == long(rounds) * icfg.steps);
    CHECK(paced.store.push_time_s(0) > 0);
    std::vector<float> a(paced.levels[0].size), b(a.size());
    REQUIRE(paced.store.pull(0, a));
    REQUIRE(plain.store.pull(0, b));
    CHECK(a == b);
  }
}
