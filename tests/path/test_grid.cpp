// path/: module_grid indexing, level maps, the path plan.
#include <catch2/catch.hpp>

#include <set>

#include "paco/nn/gpt.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/module_grid.hpp"
#include "paco/path/path_plan.hpp"

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
