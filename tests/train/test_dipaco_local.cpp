// In-process DiLoCo / DiPaCo against known answers (STYLE.md §4):
//   DiLoCo with outer sgd(lr=1) is FedAvg; H=1 with inner SGD and outer sgd(lr=1) is one
//   data-parallel step on the union batch; DiPaCo with one path is DiLoCo with k=1.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <thread>
#include <type_traits>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/dipaco_local.hpp"

#include "small_gpt.hpp"

using namespace paco;

namespace {

io::token_stream dipaco_stream(std::uint64_t seed, std::size_t n = 4000) {
  return paco::testing::synthetic_stream(seed, n, 7, 5);
}

double max_diff(const float* a, const float* b, std::size_t n) {
  double m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

// DiLoCo with outer sgd(lr=1) over three workers with inner optimizer `inner` (made for the
// model by make_inner): the store's module after one round against the plain mean of three
// independent workers' θ_end, as max |θ_store − mean θ_i|.
template <class MakeInner>
double fedavg_gap(MakeInner make_inner) {
  nn::gpt model(train_tests::small_gpt());
  arena<host> a0(model.layout());
  model.init(a0, 1);
  auto levels = *path::split_gpt_levels(model.layout(), 2, 1);
  auto grid = path::module_grid<1>::experts({1});
  std::vector<io::token_stream> shards{dipaco_stream(1), dipaco_stream(2), dipaco_stream(3)};
  const auto plan = *path::path_plan::make(grid, levels, 3);
  std::vector<train::worker_spec> ws;
  for (int i = 0; i < 3; ++i) ws.push_back({&shards[i], 10u + i});
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 4,
                          .grad_clip = 0,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-2f, .warmup = 0, .total = 100}};
  const auto inner = make_inner(model);
  using inner_t = std::remove_cvref_t<decltype(inner)>;
  store::local_store<outer::sgd> store(plan.module_table(), outer::sgd{.lr = 1.0f},
                                       {.weight_by_shard = false});
  REQUIRE(store.store().info(0).paths_through == 3);
  train::init_modules(store, plan, a0.get(plane::param).data());
  REQUIRE(train::run_local(store, model, plan, ws, inner, cfg, 1).ok());
  REQUIRE(store.store().round(0) == 1);
  // Reference: three independent workers from θ0, then the plain mean of θ_end.
  std::vector<float> mean(model.layout().total(), 0.0f);
  for (int i = 0; i < 3; ++i) {
    train::path_worker<nn::gpt, inner_t> w(i, model, levels, {0}, inner, cfg, shards[i], 10u + i);
    auto th = w.state().get(plane::param);
    std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), th.begin());
    w.train();
    for (std::size_t k = 0; k < mean.size(); ++k) mean[k] += th[k] / 3.0f;
  }
  std::vector<float> got(model.layout().total());
  store.pull(0, std::span<float>(got.data() + levels[0].offset, levels[0].size));
  return max_diff(got.data() + levels[0].offset, mean.data() + levels[0].offset, levels[0].size);
}

}  // namespace

TEST_CASE("DiLoCo with outer sgd(lr=1) is FedAvg", "[dipaco][known-answer]") {
  const double d = fedavg_gap([](const nn::gpt&) { return optim::adamw{.lr = 1e-2f}; });
  INFO("max |θ_store − mean θ_i| = " << d);
  REQUIRE(d < 1e-6);
}

TEST_CASE("MuLoCo (Muon inner) with outer sgd(lr=1) is FedAvg of Muon workers",
          "[dipaco][known-answer][muon]") {
  const double d = fedavg_gap([](const nn::gpt& m) {
    return *optim::inner_by_name("muon", m, optim::adamw{.lr = 1e-2f}, {.lr = 0.02f});
  });
  INFO("max |θ_store − mean θ_i| = " << d);
  REQUIRE(d < 1e-6);
}

TEST_CASE("H=1, inner SGD, outer sgd(lr=1) is one data-parallel step on the union batch",
          "[dipaco][known-answer]") {
  nn::gpt model(train_tests::small_gpt());
  arena<host> a0(model.layout());
  model.init(a0, 2);
  auto levels = *path::split_gpt_levels(model.layout(), 2, 1);
  auto grid = path::module_grid<1>::experts({1});
  std::vector<io::token_stream> shards{dipaco_stream(4), dipaco_stream(5)};
  const auto plan = *path::path_plan::make(grid, levels, 2);
  std::vector<train::worker_spec> ws{{&shards[0], 7}, {&shards[1], 8}};
  const float lr = 0.1f;
  train::inner_config cfg{.batch = 3,
                          .ctx = 16,
                          .steps = 1,
                          .grad_clip = 0,
                          .schedule = {.lr = lr, .min_lr = lr, .warmup = 0, .total = 10}};
  store::local_store<outer::sgd> store(plan.module_table(), outer::sgd{.lr = 1.0f},
                                       {.weight_by_shard = false});
  train::init_modules(store, plan, a0.get(plane::param).data());
  REQUIRE(train::run_local(store, model, plan, ws, optim::sgd{.lr = lr}, cfg, 1).ok());
  // The union batch: worker 0's batch then worker 1's, as their samplers draw them.
  std::vector<std::int32_t> x(6 * 16), y(6 * 16);
  io::batch_sampler s0(shards[0], 3, 16, 7), s1(shards[1], 3, 16, 8);
  s0.next(x.data(), y.data());
  s1.next(x.data() + 3 * 16, y.data() + 3 * 16);
  arena<host> dp(model.layout());
  auto th = dp.get(plane::param);
  std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), th.begin());
  nn::replica<nn::gpt> rep(model, 6, 16, 1);
  rep.forward_backward(dp, x.data(), y.data());
  optim::sgd{.lr = lr}.step(dp, 1, lr);
  std::vector<float> got(model.layout().total());
  store.pull(0, std::span<float>(got.data() + levels[0].offset, levels[0].size));
  const double d =
      max_diff(got.data() + levels[0].offset, th.data() + levels[0].offset, levels[0].size);
  INFO("max |θ_DiLoCo − θ_DP| = " << d);
  REQUIRE(d < 1e-6);
}

TEST_CASE("DiPaCo with a single path equals DiLoCo with k=1", "[dipaco][known-answer]") {
  nn::gpt model(train_tests::small_gpt());
  arena<host> a0(model.layout());
  model.init(a0, 3);
  auto shard = dipaco_stream(9);
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 3,
                          .grad_clip = 1.0f,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 2, .total = 9}};
  optim::adamw inner{.lr = 1e-2f};
  // DiLoCo k = 1: one module (the whole model).
  auto l1 = *path::split_gpt_levels(model.layout(), 2, 1);
  auto g1 = path::module_grid<1>::experts({1});
  const auto p1 = *path::path_plan::make(g1, l1);
  std::vector<train::worker_spec> w1{{&shard, 5}};
  store::local_store<outer::nesterov> s1(p1.module_table(), outer::nesterov{});
  train::init_modules(s1, p1, a0.get(plane::param).data());
  REQUIRE(train::run_local(s1, model, p1, w1, inner, cfg, 3).ok());
  // DiPaCo 1×1 with two levels: two modules, one path.
  auto l2 = *path::split_gpt_levels(model.layout(), 2, 2);
  auto g2 = path::module_grid<2>::experts({1, 1});
  const auto p2 = *path::path_plan::make(g2, l2);
  std::vector<train::worker_spec> w2{{&shard, 5}};
  store::local_store<outer::nesterov> s2(p2.module_table(), outer::nesterov{});
  train::init_modules(s2, p2, a0.get(plane::param).data());
  REQUIRE(train::run_local(s2, model, p2, w2, inner, cfg, 3).ok());
  std::vector<float> t1(model.layout().total()), t2(model.layout().total());
  train::assemble_path(s1, p1, 0, t1.data());
  train::assemble_path(s2, p2, 0, t2.data());
  REQUIRE(std::equal(t1.begin(), t1.end(), t2.begin()));  // bit-identical
  REQUIRE(s2.store().round(1) == 3);
}

TEST_CASE("DiPaCo 2x2: each module averages the paths through it", "[dipaco]") {
  nn::gpt model(train_tests::small_gpt());
  arena<host> a0(model.layout());
  model.init(a0, 4);
  auto levels = *path::split_gpt_levels(model.layout(), 2, 2);
  auto grid = path::module_grid<2>::experts({2, 2});
  std::vector<io::token_stream> shards{dipaco_stream(11), dipaco_stream(12, 3000),
                                       dipaco_stream(13), dipaco_stream(14, 5000)};
  const auto plan = *path::path_plan::make(grid, levels);
  std::vector<train::worker_spec> ws;
  for (int p = 0; p < 4; ++p) ws.push_back({&shards[p], 20u + p});
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 2,
                          .grad_clip = 0,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-2f, .warmup = 0, .total = 10}};
  optim::adamw inner{.lr = 1e-2f};
  store::local_store<outer::sgd> store(plan.module_table(), outer::sgd{.lr = 1.0f},
                                       {.weight_by_shard = true});
  for (int m = 0; m < 4; ++m) REQUIRE(store.store().info(m).paths_through == 2);
  train::init_modules(store, plan, a0.get(plane::param).data());
  REQUIRE(train::run_local(store, model, plan, ws, inner, cfg, 1).ok());
  // Module (0,0) = id 0 is on paths 0 and 1 (level 0 most significant): with outer sgd(lr=1)
  // and shard weights it must be the shard-weighted mean of those two paths' θ_end.
  std::vector<float> ref(levels[0].size, 0.0f);
  const double w0 = shards[0].ids.size(), w1 = shards[1].ids.size();
  for (int p : {0, 1}) {
    train::path_worker<nn::gpt, optim::adamw> w(p, model, levels, plan.path_modules(p), inner, cfg,
                                                shards[p], 20u + p);
    auto th = w.state().get(plane::param);
    std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), th.begin());
    w.train();
    const float c = float((p == 0 ? w0 : w1) / (w0 + w1));
    for (std::size_t k = 0; k < ref.size(); ++k) ref[k] += c * th[levels[0].offset + k];
  }
  std::vector<float> got(levels[0].size);
  store.pull(0, got);
  REQUIRE(max_diff(got.data(), ref.data(), ref.size()) < 1e-5);
  auto hist = store.history();
  REQUIRE(hist.size() == 4);
  for (auto& h : hist) REQUIRE(h.arrived == 2);
}

#include "paco/net/inproc.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/round_loop.hpp"

TEST_CASE(
    "DiLoCo over a ring all-reduce matches the store-based DiLoCo and keeps replicas identical",
    "[dipaco][known-answer]") {
  nn::gpt model(train_tests::small_gpt());
  arena<host> a0(model.layout());
  model.init(a0, 6);
  auto levels = *path::split_gpt_levels(model.layout(), 2, 1);
  auto grid = path::module_grid<1>::experts({1});
  std::vector<io::token_stream> shards{dipaco_stream(21), dipaco_stream(22), dipaco_stream(23)};
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 3,
                          .grad_clip = 1.0f,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 1, .total = 9}};
  optim::adamw inner{.lr = 1e-2f};
  const int rounds = 3;
  // Reference: the store-based run, uniform weights (DiLoCo's plain mean).
  const auto plan = *path::path_plan::make(grid, levels, 3);
  std::vector<train::worker_spec> ws;
  for (int i = 0; i < 3; ++i) ws.push_back({&shards[i], 40u + i});
  store::local_store<outer::nesterov> ref(plan.module_table(), outer::nesterov{},
                                          {.weight_by_shard = false});
  train::init_modules(ref, plan, a0.get(plane::param).data());
  REQUIRE(train::run_local(ref, model, plan, ws, inner, cfg, rounds).ok());
  std::vector<float> want(model.layout().total());
  train::assemble_path(ref, plan, 0, want.data());

  auto world = net::inproc::world(3);
  std::vector<std::vector<float>> got(3);
  std::vector<status> errs(3);
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r)
    th.emplace_back([&, r] {
      train::path_worker<nn::gpt, optim::adamw> w(r, model, levels, {0}, inner, cfg, shards[r],
                                                  40u + r);
      auto p = w.state().get(plane::param);
      std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), p.begin());
      train::round_loop<net::inproc, train::path_worker<nn::gpt, optim::adamw>, outer::nesterov,
                        train::blocking>
          loop(world[r], w, outer::nesterov{});
      errs[r] = loop.run(rounds, std::chrono::seconds(30));
      got[r].assign(p.begin(), p.end());
    });
  for (auto& t : th) t.join();
  for (auto& e : errs) REQUIRE(e.ok());
  REQUIRE(got[0] == got[1]);  // replicas bit-identical
  REQUIRE(got[1] == got[2]);
  // The ring sums in another order than the store: equal up to float rounding.
  const auto& sp = levels[0];
  REQUIRE(max_diff(got[0].data() + sp.offset, want.data() + sp.offset, sp.size) < 1e-5);
}

TEST_CASE("local_run: inner state survives a re-routing; a run cut into phases is the same run",
          "[dipaco][local_run]") {
  nn::gpt model(train_tests::small_gpt());
  arena<host> a0(model.layout());
  model.init(a0, 8);
  auto levels = *path::split_gpt_levels(model.layout(), 2, 2);
  auto grid = path::module_grid<2>::experts({2, 2});
  const auto plan = *path::path_plan::make(grid, levels);
  std::vector<io::token_stream> shards{dipaco_stream(31), dipaco_stream(32), dipaco_stream(33),
                                       dipaco_stream(34)};
  std::vector<io::token_stream> moved{dipaco_stream(41), dipaco_stream(42), dipaco_stream(43),
                                      dipaco_stream(44)};
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 3,
                          .grad_clip = 1.0f,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 1, .total = 18}};
  optim::adamw inner{.lr = 1e-2f};
  std::vector<train::worker_spec> ws;
  for (int w = 0; w < 4; ++w) ws.push_back({&shards[w], 50u + w});
  using run_t = train::local_run<nn::gpt, optim::adamw, outer::nesterov>;
  struct outcome {
    std::unique_ptr<store::local_store<outer::nesterov>> store;
    std::unique_ptr<run_t> run;
    std::vector<float> theta;  // every path's parameters, path after path
  };
  auto train = [&](bool split, bool reroute) {
    outcome o;
    o.store = std::make_unique<store::local_store<outer::nesterov>>(plan.module_table(),
                                                                    outer::nesterov{});
    train::init_modules(*o.store, plan, a0.get(plane::param).data());
    auto run = run_t::make(*o.store, model, plan, ws, inner, cfg);
    REQUIRE(run.ok());
    o.run = std::make_unique<run_t>(std::move(*run));
    if (split) {
      REQUIRE(o.run->run(2).ok());
      if (reroute) o.run->set_shards({&moved[0], &moved[1], &moved[2], &moved[3]});
      REQUIRE(o.run->run(4).ok());
    } else {
      REQUIRE(o.run->run(6).ok());
    }
    const std::size_t n = model.layout().total();
    o.theta.resize(n * 4);
    for (int p = 0; p < 4; ++p)
      train::assemble_path(*o.store, plan, p, o.theta.data() + std::size_t(p) * n);
    return o;
  };
  // Two phases on unchanged shards are bit-identical to one run: nothing is reset in between.
  const auto whole = train(false, false);
  REQUIRE(train(true, false).theta == whole.theta);
  // After a re-routing the moments are not zero, the step count went on, and the result differs.
  auto rerouted = train(true, true);
  REQUIRE(rerouted.theta != whole.theta);
  for (std::size_t w = 0; w < rerouted.run->size(); ++w) {
    auto& wk = rerouted.run->at(w);
    REQUIRE(wk.inner_step() == 18);
    double s = 0;
    for (float v : wk.state().get(plane::moment2)) s += double(v);
    REQUIRE(s > 0);
    REQUIRE(wk.shard_tokens() == double(moved[w].ids.size()));
  }
}

TEST_CASE(
    "local_run: a push for a round that already closed leaves the worker out of that "
    "round, the run goes on",
    "[dipaco][local_run]") {
  nn::gpt model(train_tests::small_gpt());
  arena<host> a0(model.layout());
  model.init(a0, 9);
  auto levels = *path::split_gpt_levels(model.layout(), 2, 1);
  std::vector<io::token_stream> shards{dipaco_stream(61), dipaco_stream(62)};
  const auto plan = *path::path_plan::make(path::module_grid<1>::experts({1}), levels, 2);
  std::vector<train::worker_spec> ws{{&shards[0], 70u}, {&shards[1], 71u}};
  // The store expects one push per round and both workers pull the round before either pushes:
  // whichever pushes second is late, every round.
  store::local_store<outer::nesterov> store({store::module_info{0, levels[0].size, 1}},
                                            outer::nesterov{});
  train::init_modules(store, plan, a0.get(plane::param).data());
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 20,
                          .grad_clip = 1.0f,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 1, .total = 100}};
  auto run = train::local_run<nn::gpt, optim::adamw, outer::nesterov>::make(
      store, model, plan, ws, optim::adamw{.lr = 1e-2f}, cfg);
  REQUIRE(run.ok());
  auto s = run->run(3);
  INFO((s.ok() ? std::string("ok") : s.error().what()));
  REQUIRE(s.ok());
  REQUIRE(store.store().round(0) == 3);
  REQUIRE(run->left_out() == 3);
  for (auto& h : store.history()) REQUIRE(h.arrived == 1);
}

TEST_CASE(
    "local_run under every rule: one worker, outer SGD at rate 1: co2 and eager are continuous "
    "training, the naive delayed rule is not; streaming with τ = 0, α = 0 is blocking; "
    "co2_snapshot drops the steps before each write-back",
    "[dipaco][local_run][sync]") {
  // One worker trained rounds × H steps straight (no store, no outer step) is what co2 and eager
  // must give with one worker at outer SGD rate 1: its own Δ is applied before the mean (σ = 1)
  // and the late mean replaces it exactly.
  nn::gpt model(train_tests::small_gpt());
  arena<host> a0(model.layout());
  model.init(a0, 3);
  auto levels = *path::split_gpt_levels(model.layout(), 2, 2);
  const auto plan = *path::path_plan::make(path::module_grid<2>::experts({1, 1}), levels);
  const auto shard = dipaco_stream(61);
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 4,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-2f, .warmup = 0, .total = 100}};
  const int rounds = 4;
  const std::size_t n = model.layout().total();
  std::vector<float> straight(n);
  {
    train::path_worker<nn::gpt, optim::adamw> w(0, model, levels, plan.path_modules(0), {}, cfg,
                                                shard, 70);
    auto th = w.state().get(plane::param);
    std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), th.begin());
    for (int r = 0; r < rounds; ++r) w.train();
    std::copy(th.begin(), th.end(), straight.begin());
  }
  const double moved = max_diff(straight.data(), a0.get(plane::param).data(), n);
  REQUIRE(moved > 0.01);
  auto run = [&](train::sync_choice rule) {
    store::local_store<outer::sgd> store(plan.module_table(), outer::sgd{.lr = 1.0f});
    train::init_modules(store, plan, a0.get(plane::param).data());
    auto r = train::local_run<nn::gpt, optim::adamw, outer::sgd>::make(
        store, model, plan, {{&shard, 70}}, optim::adamw{}, cfg);
    REQUIRE(r.ok());
    r->set_sync(rule);
    std::vector<long> reported;
    REQUIRE(
        r->run(rounds, [&](const train::round_report& rr) { reported.push_back(rr.round); }).ok());
    REQUIRE(reported == std::vector<long>{0, 1, 2, 3});
    REQUIRE(store.store().round(0) == rounds);
    REQUIRE(store.store().round(1) == rounds);
    std::vector<float> theta(n);
    train::assemble_path(store, plan, 0, theta.data());
    // Every worker ends on the global modules.
    const auto th = r->at(0).state().get(plane::param);
    REQUIRE(max_diff(theta.data(), th.data(), n) == 0.0);
    return theta;
  };
  const auto blocking = run(train::blocking{});
  // Blocking with one worker at rate 1 is continuous training too (G = θ_end each round); co2
  // and eager reach it to rounding (G − Δ is the live θ within an ulp once per round).
  REQUIRE(max_diff(blocking.data(), straight.data(), n) <= 1e-2 * moved);
  REQUIRE(max_diff(run(train::co2{}).data(), straight.data(), n) <= 1e-2 * moved);
  REQUIRE(max_diff(run(train::eager{}).data(), straight.data(), n) <= 1e-2 * moved);
  REQUIRE(max_diff(run(train::naive_delayed{}).data(), straight.data(), n) >= 0.3 * moved);
  // Streaming over the two levels with τ = 0 and α = 0 syncs each level at its slot: with one
  // worker at rate 1 every landing hands back the worker's own θ_l, so it is continuous too.
  REQUIRE(max_diff(run(train::streaming{}).data(), straight.data(), n) <= 1e-2 * moved);
  // co2_snapshot with τ = 2 of H = 4: each round's averaged snapshot overwrites θ two steps
  // after the push. With one worker at rate 1 the snapshot is the worker's own θ at the push, so
  // the run is one worker that copies θ at each round's end, trains τ steps and goes back to the
  // copy (its inner optimizer state and sampler going on) — trained here without a store or an
  // outer step. It is not continuous training: the dropped steps show.
  std::vector<float> snapshotted(n);
  {
    train::path_worker<nn::gpt, optim::adamw> w(0, model, levels, plan.path_modules(0), {}, cfg,
                                                shard, 70);
    auto th = w.state().get(plane::param);
    std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), th.begin());
    const int tau = 2;
    std::vector<float> snap(n);
    for (int r = 0; r < rounds; ++r) {
      w.train(r == 0 ? cfg.steps : cfg.steps - tau);
      if (r + 1 == rounds) break;
      std::copy(th.begin(), th.end(), snap.begin());
      w.train(tau);
      std::copy(snap.begin(), snap.end(), th.begin());
    }
    std::copy(th.begin(), th.end(), snapshotted.begin());
  }
  const auto snapshot_run = run(train::co2_snapshot{.overlap = 2});
  REQUIRE(max_diff(snapshot_run.data(), snapshotted.data(), n) <= 1e-2 * moved);
  REQUIRE(max_diff(snapshot_run.data(), straight.data(), n) >= 0.1 * moved);
  // A rule the levels cannot stream is refused by name.
  store::local_store<outer::sgd> store(plan.module_table(), outer::sgd{.lr = 1.0f});
  train::init_modules(store, plan, a0.get(plane::param).data());
  auto r = train::local_run<nn::gpt, optim::adamw, outer::sgd>::make(store, model, plan,
                                                                     {{&shard, 70}}, {}, cfg);
  REQUIRE(r.ok());
  r->set_sync(train::streaming{.overlap = 2});
  const auto s = r->run(1);
  REQUIRE(!s.ok());
  REQUIRE(s.error().code == errc::invalid_argument);
  REQUIRE(s.error().message.find("one per level") != std::string::npos);
}
