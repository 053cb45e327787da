// store/: the module store (weighted mean, outer step, late pushes, snapshots) and its file.
#include <catch2/catch.hpp>

#include <filesystem>
#include <limits>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "paco/nn/gpt.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/module_grid.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/store/local_store.hpp"
#include "paco/store/metered.hpp"
#include "paco/store/module_store.hpp"
#include "paco/store/push_pace.hpp"
#include "paco/store/store_file.hpp"

using namespace paco;

TEST_CASE("module_store: weighted mean of arrived deltas, outer step, hash, late push refused",
          "[store]") {
  store::module_store<outer::sgd> st({{0, 3, 2}, {1, 2, 1}}, outer::sgd{.lr = 1.0f},
                                     {.weight_by_shard = true});
  st.set(0, std::vector<float>{1, 2, 3});
  auto h0 = st.hash(0);
  REQUIRE(st.push(0, /*path*/ 0, 0, std::vector<float>{1, 1, 1}, 1.0).ok());
  REQUIRE(!st.complete(0));
  REQUIRE(st.push(0, 1, 0, std::vector<float>{4, 4, 4}, 3.0).ok());
  REQUIRE(st.complete(0));
  auto dup = st.push(0, 1, 0, std::vector<float>{0, 0, 0}, 1.0);
  REQUIRE(dup.error().code == errc::mismatch);
  auto r = st.close(0);
  REQUIRE(r.arrived == 2);
  REQUIRE(r.round == 0);
  std::vector<float> th(3);
  auto [round, h] = st.pull(0, th);
  REQUIRE(round == 1);
  // Δ = (1·1 + 3·4)/4 = 3.25; θ − Δ
  REQUIRE(th == std::vector<float>{1 - 3.25f, 2 - 3.25f, 3 - 3.25f});
  REQUIRE(h == r.hash);
  REQUIRE(h != h0);
  auto late = st.push(0, 0, 0, std::vector<float>{1, 1, 1}, 1.0);
  REQUIRE(late.error().code == errc::mismatch);
  REQUIRE(st.push(1, 0, 0, std::vector<float>{NAN, 0}, 1.0).error().code == errc::invalid_argument);
  REQUIRE(st.push(1, 0, 0, std::vector<float>{1, 0, 0}, 1.0).error().code ==
          errc::invalid_argument);
  // A round where nobody pushed advances without changing θ.
  auto before = st.hash(1);
  auto r1 = st.close(1);
  REQUIRE(r1.arrived == 0);
  REQUIRE(st.hash(1) == before);
  REQUIRE(st.round(1) == 1);
}

TEST_CASE("module_store merge_late: a push s rounds late joins the open round at weight 1/(1+s)",
          "[store]") {
  // Outer SGD at rate 1 (θ ← θ − Δ), two paths of equal shard weight through one module.
  store::module_store<outer::sgd> st({{0, 2, 2}}, outer::sgd{.lr = 1.0f}, {});
  st.merge_late(1);
  st.set(0, std::vector<float>{10, 20});
  // Round 0: path 0 alone (path 1 is slow); θ1 = θ0 − Δ_a.
  REQUIRE(st.push(0, 0, 0, std::vector<float>{1, 2}, 1.0).ok());
  REQUIRE(st.close(0).late_merged == 0);
  // Round 1: path 1's Δ_b from base 0 (s = 1, weight ½) and path 0's Δ_c from base 1.
  REQUIRE(st.push(0, 1, 0, std::vector<float>{6, 3}, 1.0).ok());
  REQUIRE(st.pushed(0) == 1);
  REQUIRE(st.pushed_on_time(0) == 0);
  REQUIRE_FALSE(st.has_pushed(0, 1));  // not from this round's base
  REQUIRE(st.push(0, 1, 0, std::vector<float>{6, 3}, 1.0).error().code == errc::mismatch);
  REQUIRE(st.push(0, 0, 1, std::vector<float>{3, 0}, 1.0).ok());
  const auto r = st.close(0);
  REQUIRE(r.arrived == 2);
  REQUIRE(r.late_merged == 1);
  // Closed form: θ2 = θ1 − (1·Δ_c + ½·Δ_b) / (1 + ½) = (9, 18) − ((3, 0) + (3, 1.5)) / 1.5
  //            = (9, 18) − (4, 1) = (5, 17).
  std::vector<float> th(2);
  REQUIRE(st.pull(0, th).first == 2);
  REQUIRE(th[0] == Approx(5.0f).epsilon(1e-6));
  REQUIRE(th[1] == Approx(17.0f).epsilon(1e-6));
  // Two rounds late is beyond max_staleness = 1: refused, naming both rounds and the limit.
  REQUIRE(st.push(0, 0, 2, std::vector<float>{1, 1}, 1.0).ok());
  st.close(0);
  st.close(0);
  const auto far = st.push(0, 1, 2, std::vector<float>{1, 1}, 1.0);
  REQUIRE(far.error().code == errc::mismatch);
  REQUIRE_THAT(far.error().message, Catch::Contains("of module 0 whose open round is 4 (more "
                                                    "than max_staleness 1 rounds late)"));
  REQUIRE(
      st.push(0, 1, std::numeric_limits<long>::min(), std::vector<float>{1, 1}, 1.0).error().code ==
      errc::mismatch);  // no overflow measuring how late
  // The fold of s = 0 is a normal push: the same bits as a store without merging.
  store::module_store<outer::sgd> a({{0, 2, 2}}, outer::sgd{.lr = 1.0f}, {}),
      b({{0, 2, 2}}, outer::sgd{.lr = 1.0f}, {});
  b.merge_late(2);
  for (auto* x : {&a, &b}) {
    x->set(0, std::vector<float>{0.1f, 0.2f});
    REQUIRE(x->push(0, 0, 0, std::vector<float>{0.3f, 0.7f}, 2.0).ok());
    REQUIRE(x->push(0, 1, 0, std::vector<float>{0.5f, 0.11f}, 3.0).ok());
  }
  REQUIRE(a.close(0).hash == b.close(0).hash);
}

TEST_CASE("push_pace: the lower median of each round's push times, then of the last rounds'",
          "[store]") {
  store::push_pace p(3);
  CHECK(p.seconds(0) == 0.0);  // nothing closed yet
  p.pushed(0, 1.9);
  p.pushed(0, 8.0);  // a slow worker: of two, the faster sets the pace
  p.closed(0);
  CHECK(p.seconds(0) == 1.9);
  p.closed(0);  // a round closed without an on-time push changes nothing
  CHECK(p.seconds(0) == 1.9);
  p.pushed(0, 3.0);
  p.closed(0);  // rounds {1.9, 3.0}: 1.9
  CHECK(p.seconds(0) == 1.9);
  for (double t : {2.6, 2.4, 2.5}) p.pushed(0, t);
  p.closed(0);  // rounds {1.9, 3.0, 2.5}: 2.5
  CHECK(p.seconds(0) == 2.5);
  p.pushed(0, 4.0);
  p.closed(0);  // a window of 3: {3.0, 2.5, 4.0}: 3.0
  CHECK(p.seconds(0) == 3.0);
  CHECK(p.seconds(1) == 0.0);  // modules apart
}

TEST_CASE("module_store snapshot round-trips θ, outer state and round", "[store]") {
  store::module_store<outer::nesterov> a({{0, 4, 1}}, outer::nesterov{});
  a.set(0, std::vector<float>{1, 2, 3, 4});
  REQUIRE(a.push(0, 0, 0, std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, 1).ok());
  a.close(0);
  store::module_store<outer::nesterov> b({{0, 4, 1}}, outer::nesterov{});
  REQUIRE(b.restore(0, a.save(0)).ok());
  REQUIRE(b.hash(0) == a.hash(0));
  REQUIRE(b.round(0) == 1);
  // Same next step → same result (momentum restored too).
  for (auto* s : {&a, &b}) {
    REQUIRE(s->push(0, 0, 1, std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}, 1).ok());
    s->close(0);
  }
  REQUIRE(a.hash(0) == b.hash(0));
}

TEST_CASE("store_file: a store checkpoint round-trips and says what its vectors are",
          "[store][store_file]") {
  nn::gpt m({.vocab = 16, .ctx = 8, .d = 8, .layers = 2, .heads = 2});
  auto lv = *path::split_gpt_levels(m.layout(), 2, 2);
  const auto plan = *path::path_plan::make(path::module_grid<2>::experts({2, 1}), lv);
  store::module_store<outer::nesterov> st(plan.module_table(), outer::nesterov{});
  for (int k = 0; k < plan.modules(); ++k) {
    std::vector<float> th(plan.span_of(k).size);
    for (std::size_t i = 0; i < th.size(); ++i) th[i] = float(k) + 0.001f * float(i);
    st.set(k, th);
  }
  // Module 2 (the shared level-1 module) closes a round with one push per path.
  for (int p = 0; p < 2; ++p)
    REQUIRE(st.push(2, p, 0, std::vector<float>(plan.span_of(2).size, 0.5f), 1.0).ok());
  st.close(2);
  const auto file = std::filesystem::temp_directory_path() /
                    ("paco_store_" + std::to_string(::getpid()) + ".safetensors");
  REQUIRE(save_store_file(file, st, plan, "model.d=8").ok());

  store::module_store<outer::nesterov> back(plan.module_table(), outer::nesterov{});
  REQUIRE(load_store_file(file, back, plan, "model.d=8").ok());
  for (int k = 0; k < plan.modules(); ++k) {
    REQUIRE(back.round(k) == st.round(k));
    REQUIRE(back.hash(k) == st.hash(k));
  }
  // The layout record: grid and, per module, level, expert, span and the tensors it covers.
  auto f = io::load_safetensors(file);
  REQUIRE(f.ok());
  const auto layout = nlohmann::json::parse(f->metadata.at("layout"));
  REQUIRE(layout["grid"] == "2x1");
  REQUIRE(layout["modules"].size() == 3);
  REQUIRE(layout["modules"][2]["level"] == 1);
  REQUIRE(layout["modules"][1]["expert"] == 1);
  REQUIRE(layout["modules"][2]["offset"] == lv[1].offset);
  REQUIRE(layout["modules"][0]["entries"][0] == "embed");
  // Refused: another configuration, another grid.
  auto other_cfg = load_store_file(file, back, plan, "model.d=16");
  REQUIRE(!other_cfg.ok());
  const auto plan22 = *path::path_plan::make(path::module_grid<2>::experts({2, 2}), lv);
  store::module_store<outer::nesterov> four(plan22.module_table(), outer::nesterov{});
  auto other_grid = load_store_file(file, four, plan22, "model.d=8");
  REQUIRE(!other_grid.ok());
  REQUIRE(other_grid.error().message.find("another grid") != std::string::npos);
  // Bound to a run: refused by another run's id; taken where the file records none (written
  // before checkpoints were bound) and by its own.
  REQUIRE(load_store_file(file, back, plan, "model.d=8", {{"run_id", "r2"}}).ok());
  REQUIRE(save_store_file(file, st, plan, "model.d=8", {{"run_id", "r1"}}).ok());
  REQUIRE(load_store_file(file, back, plan, "model.d=8", {{"run_id", "r1"}}).ok());
  auto foreign = load_store_file(file, back, plan, "model.d=8", {{"run_id", "r2"}});
  REQUIRE(!foreign.ok());
  REQUIRE(foreign.error().code == errc::mismatch);
  REQUIRE(foreign.error().message.find("run_id 'r1', not to 'r2'") != std::string::npos);
  std::filesystem::remove(file);
}

TEST_CASE("metered: forwards to its store and records every push; the peak rate of a timeline",
          "[store]") {
  store::local_store<outer::sgd> inner({{0, 3, 1}}, outer::sgd{.lr = 1.0f});
  store::metered m(inner);
  static_assert(store::EncodedModuleStore<store::metered<store::local_store<outer::sgd>>>);
  std::vector<float> theta(3);
  REQUIRE(m.pull(0, theta).ok());
  REQUIRE(m.push(0, 0, 0, std::vector<float>{1, 1, 1}, 1.0).ok());
  REQUIRE(m.wait_closed(0, 0, std::chrono::steady_clock::now()).ok());
  REQUIRE(inner.store().round(0) == 1);                              // it reached the store
  REQUIRE(!m.push(0, 0, 0, std::vector<float>{1, 1, 1}, 1.0).ok());  // late: refused, counted
  auto got = m.take();
  REQUIRE(got.size() == 2);
  REQUIRE(got[0].bytes == store::wire::push_bytes(12));
  REQUIRE(got[0].end_s >= got[0].start_s);
  REQUIRE(got[1].start_s >= got[0].end_s);
  REQUIRE(m.take().empty());

  // A timeline by hand: 100 bytes over [0, 1), 100 over [2, 2.5), 40 at the instant 4.
  const std::vector<store::push_record> t{{0, 1, 100}, {2, 2.5, 100}, {4, 4, 40}};
  REQUIRE(peak_rate(t, 1.0) == Approx(100.0));      // either push alone fills a window of 1 s
  REQUIRE(peak_rate(t, 0.5) == Approx(200.0));      // the second in half a second
  REQUIRE(peak_rate(t, 3.0) == Approx(200.0 / 3));  // [0, 3) or [1.5, 4.5): 200 bytes
  REQUIRE(peak_rate(t, 10.0) == Approx(24.0));      // everything in one window
}
