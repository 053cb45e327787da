// path/: module_grid indexing, level maps, the module store.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "paco/nn/gpt.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/module_grid.hpp"
#include "paco/path/module_store.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/path/store_file.hpp"

using namespace paco;
using namespace paco::path;

TEST_CASE("module_grid: mixed-radix paths, module ids and P_{l,e}", "[path]") {
  auto g = module_grid<3>::experts({2, 3, 1});
  REQUIRE(g.paths() == 6);
  REQUIRE(g.module_count() == 6);
  std::set<std::array<int, 3>> seen;
  for (int i = 0; i < g.paths(); ++i) {
    auto p = g.path_at(i);
    REQUIRE(g.index_of(p) == i);
    seen.insert(p.expert);
    for (std::size_t l = 0; l < 3; ++l) REQUIRE(p.expert[l] < g.modules_at(l));
  }
  REQUIRE(seen.size() == 6);
  REQUIRE(g.path_at(0).expert == std::array<int, 3>{0, 0, 0});
  REQUIRE(g.path_at(5).expert == std::array<int, 3>{1, 2, 0});  // level 0 most significant
  REQUIRE(g.paths_through(0, 1) == 3);
  REQUIRE(g.paths_through(1, 2) == 2);
  REQUIRE(g.paths_through(2, 0) == 6);  // a shared level
  REQUIRE(g.paths_of(1, 2) == std::vector<int>{2, 5});
  for (int id = 0; id < g.module_count(); ++id) {
    auto [l, e] = g.module_at(id);
    REQUIRE(g.module_id(l, e) == id);
  }
  REQUIRE(g.describe() == "2x3x1");
  REQUIRE_THROWS_AS(module_grid<1>::experts({0}), error_exception);
}

TEST_CASE("module_grid: path-specific levels give one module per path", "[path]") {
  module_grid<2> g({level_spec{.experts = 2}, level_spec{.path_specific = true}});
  REQUIRE(g.paths() == 2);
  REQUIRE(g.modules_at(1) == 2);
  REQUIRE(g.paths_through(1, 1) == 1);
  REQUIRE(g.path_at(1).expert == std::array<int, 2>{1, 1});
  REQUIRE(g.index_of(g.path_at(1)) == 1);
}

TEST_CASE("level maps split a GPT into contiguous spans covering every module", "[path]") {
  nn::gpt m({.vocab = 16, .ctx = 8, .d = 8, .layers = 4, .heads = 2});
  auto s = split_gpt_levels(m.layout(), 4, 2);
  REQUIRE(s.ok());
  REQUIRE(s->size() == 2);
  REQUIRE((*s)[0].entries == std::vector<std::string>{"embed", "block.0", "block.1"});
  REQUIRE((*s)[1].entries == std::vector<std::string>{"block.2", "block.3", "ln_f", "head"});
  REQUIRE((*s)[0].offset == 0);
  REQUIRE((*s)[1].offset == (*s)[0].offset + (*s)[0].size + ((*s)[1].offset - (*s)[0].size));
  REQUIRE((*s)[1].offset + (*s)[1].size <= m.layout().total());
  REQUIRE((*s)[0].size + (*s)[1].size >= m.param_count());
  auto bad = make_level_map(m.layout(), {{"embed", "block.1"}, {"block.0"}});
  REQUIRE(!bad.ok());
  REQUIRE(bad.error().message.find("consecutive") != std::string::npos);
  REQUIRE(!make_level_map(m.layout(), {{"embed"}}).ok());          // modules left over
  REQUIRE(!make_level_map(m.layout(), {{"embed", "nope"}}).ok());  // unknown name
  REQUIRE(!split_gpt_levels(m.layout(), 4, 5).ok());
}

TEST_CASE("path_plan: modules, spans, paths and the store's table from a grid and a level map",
          "[path]") {
  nn::gpt m({.vocab = 16, .ctx = 8, .d = 8, .layers = 3, .heads = 2});
  auto lv = *split_gpt_levels(m.layout(), 3, 3);
  // Three levels: 2 experts, shared, path-specific; 2 workers per path.
  auto plan = path_plan::make(module_grid<3>({level_spec{.experts = 2}, level_spec{.experts = 1},
                                              level_spec{.path_specific = true}}),
                              lv, 2);
  REQUIRE(plan.ok());
  REQUIRE(plan->levels() == 3);
  REQUIRE(plan->paths() == 2);
  REQUIRE(plan->modules() == 5);  // 2 + 1 + 2
  REQUIRE(plan->workers() == 4);
  REQUIRE(plan->path_modules(0) == std::vector<int>{0, 2, 3});
  REQUIRE(plan->path_modules(1) == std::vector<int>{1, 2, 4});
  REQUIRE(plan->path_name(1) == "(1,0,1)");
  REQUIRE(plan->path_experts(1) == std::vector<int>{1, 0, 1});
  REQUIRE(plan->describe() == "2x1xP");
  REQUIRE(plan->level_of(2) == 1);
  REQUIRE(plan->expert_of(4) == 1);
  REQUIRE(plan->span_of(4).offset == lv[2].offset);
  REQUIRE(plan->paths_through(2) == 2);
  REQUIRE(plan->paths_through(3) == 1);
  REQUIRE(plan->path_of_worker(3) == 1);
  // Every module once: level 0's span twice, level 2's twice (path-specific), level 1's once.
  REQUIRE(plan->grid_params(m.param_count()) == m.param_count() + lv[0].size + lv[2].size);
  const auto t = plan->module_table();
  REQUIRE(t.size() == 5);
  REQUIRE(t[2].paths_through == 4);  // the shared module: both paths × 2 workers
  REQUIRE(t[0].paths_through == 2);
  REQUIRE(t[1].size == lv[0].size);
  // A path's view of a plane: its modules' spans, in level order.
  std::vector<float> th(m.layout().total(), 0.0f);
  plan->assemble(1, th.data(), [](int mod, std::span<float> dst) {
    std::fill(dst.begin(), dst.end(), float(mod));
  });
  REQUIRE(th[lv[0].offset] == 1.0f);
  REQUIRE(th[lv[1].offset] == 2.0f);
  REQUIRE(th[lv[2].offset + lv[2].size - 1] == 4.0f);
  // The same grid from run-time level specs.
  auto rt = path_plan::make_runtime(
      std::vector<level_spec>{{.experts = 2}, {.experts = 1}, {.path_specific = true}}, lv, 2);
  REQUIRE(rt.ok());
  REQUIRE(rt->path_modules(1) == plan->path_modules(1));
  // Errors name the problem.
  REQUIRE(!path_plan::make(module_grid<2>::experts({2, 2}), lv).ok());  // 3 spans, 2 levels
  auto bad = path_plan::make_runtime(std::vector<int>{2, 0, 1}, lv);
  REQUIRE(!bad.ok());
  REQUIRE(bad.error().message.find("level 1") != std::string::npos);
  REQUIRE(!path_plan::make_runtime(std::vector<int>{}, {}).ok());
  REQUIRE(!path_plan::make(module_grid<1>::experts({1}), {lv[0]}, 0).ok());
}

TEST_CASE("module_store: weighted mean of arrived deltas, outer step, hash, late push refused",
          "[path]") {
  module_store<outer::sgd> st({{0, 3, 2}, {1, 2, 1}}, outer::sgd{.lr = 1.0f},
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

TEST_CASE("module_store snapshot round-trips θ, outer state and round", "[path]") {
  module_store<outer::nesterov> a({{0, 4, 1}}, outer::nesterov{});
  a.set(0, std::vector<float>{1, 2, 3, 4});
  REQUIRE(a.push(0, 0, 0, std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, 1).ok());
  a.close(0);
  module_store<outer::nesterov> b({{0, 4, 1}}, outer::nesterov{});
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
          "[path][store_file]") {
  nn::gpt m({.vocab = 16, .ctx = 8, .d = 8, .layers = 2, .heads = 2});
  auto lv = *split_gpt_levels(m.layout(), 2, 2);
  const auto plan = *path_plan::make(module_grid<2>::experts({2, 1}), lv);
  module_store<outer::nesterov> st(plan.module_table(), outer::nesterov{});
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

  module_store<outer::nesterov> back(plan.module_table(), outer::nesterov{});
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
  const auto plan22 = *path_plan::make(module_grid<2>::experts({2, 2}), lv);
  module_store<outer::nesterov> four(plan22.module_table(), outer::nesterov{});
  auto other_grid = load_store_file(file, four, plan22, "model.d=8");
  REQUIRE(!other_grid.ok());
  REQUIRE(other_grid.error().message.find("another grid") != std::string::npos);
  std::filesystem::remove(file);
}
