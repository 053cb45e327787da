#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "paco/place/place.hpp"

using namespace paco::place;

namespace {

// Random (n,n) matrix with entries in [lo, hi); `integer` draws from few values to force ties.
std::vector<double> random_matrix(int n, paco::rng& g, double lo, double hi, bool integer = false,
                                  bool symmetric = false) {
  std::vector<double> m(static_cast<std::size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (symmetric && j < i) {
        m[i * n + j] = m[j * n + i];
        continue;
      }
      double v = lo + (hi - lo) * g.uniform();
      m[i * n + j] = integer ? std::floor(v) : v;
    }
  return m;
}

double brute_bottleneck(const std::vector<double>& w, int n) {
  std::vector<int> p(n);
  std::iota(p.begin(), p.end(), 0);
  double best = INFINITY;
  do {
    double mx = -INFINITY;
    for (int i = 0; i < n; ++i) mx = std::max(mx, w[i * n + p[i]]);
    best = std::min(best, mx);
  } while (std::next_permutation(p.begin(), p.end()));
  return best;
}

double path_cost(const std::vector<double>& w, int n, const std::vector<int>& p, bool closed) {
  double c = 0;
  for (std::size_t k = 0; k + 1 < p.size(); ++k) c += w[p[k] * n + p[k + 1]];
  if (closed && p.size() > 1) c += w[p.back() * n + p.front()];
  return c;
}

double brute_tsp(const std::vector<double>& w, int n, bool closed) {
  std::vector<int> p(n);
  std::iota(p.begin(), p.end(), 0);
  double best = INFINITY;
  do best = std::min(best, path_cost(w, n, p, closed));
  while (std::next_permutation(p.begin(), p.end()));
  return best;
}

bool is_permutation_of_n(const std::vector<int>& v, int n) {
  if (static_cast<int>(v.size()) != n) return false;
  std::vector<int> s = v;
  std::sort(s.begin(), s.end());
  for (int i = 0; i < n; ++i)
    if (s[i] != i) return false;
  return true;
}

cost_model scenario_model(const char* name) {
  return cost_model::make(make_scenario(name).value(), workload{}).value();
}

// A small symmetric topology with random latency and bandwidth.
topology random_topology(int n, paco::rng& g) {
  topology t;
  for (int i = 0; i < n; ++i) t.devices.push_back({"d" + std::to_string(i), "", 0, 0});
  t.latency_ms = random_matrix(n, g, 1, 100, false, true);
  t.bandwidth_gbps = random_matrix(n, g, 0.3, 5, false, true);
  return t;
}

std::string source_dir() {
  const char* s = std::getenv("PACO_SOURCE_DIR");
  return s ? s : PACO_TEST_SOURCE_DIR;
}

}  // namespace

// ---------------------------------------------------------------- topology and scenarios

TEST_CASE("GPT-3 XL payloads are the code's constants", "[place][topology]") {
  workload w = gpt3_xl_workload();
  REQUIRE(w.d_pp == 8);
  REQUIRE(w.d_dp == 8);
  REQUIRE(w.c_dp_gb == Approx(0.65).epsilon(1e-12));
  // 2024 * 2048 * 2 * 61.03515625 = 506e6 bytes exactly.
  REQUIRE(w.c_pp_gb == Approx(506e6 / 1073741824.0).epsilon(1e-12));
  REQUIRE(w.c_pp_gb == Approx(0.4712).margin(5e-5));
}

TEST_CASE("one pipeline hop Oregon -> Tokyo costs 7.30 s", "[place][cost]") {
  auto t = make_scenario("world").value();
  REQUIRE(t.devices[0].site == "Oregon");
  REQUIRE(t.devices[24].site == "Tokyo");
  auto m = cost_model::make(t, workload{}).value();
  // 0.096 + 0.4712 * 8 / 0.523
  const double expect = 0.096 + (506e6 / 1073741824.0) * 8.0 / 0.523;
  REQUIRE(m.pipeline_weight(0, 24) == Approx(expect).epsilon(1e-12));
  REQUIRE(m.pipeline_weight(24, 0) == Approx(expect).epsilon(1e-12));
  REQUIRE(m.pipeline_weight(0, 24) == Approx(7.30).margin(0.005));
  // Gradient payload over the same link: 0.096 + 0.65 * 8 / 0.523.
  REQUIRE(m.gradient_weight(0, 24) == Approx(0.096 + 5.2 / 0.523).epsilon(1e-12));
}

TEST_CASE("the five scenarios have the exact numbers of config.py", "[place][topology]") {
  auto at = [](const topology& t, int i, int j) {
    return std::pair{t.latency(i, j), t.bandwidth(i, j)};
  };
  for (const auto& name : scenario_names()) {
    auto t = make_scenario(name);
    REQUIRE(t.ok());
    REQUIRE(t->size() == 64);
    REQUIRE(validate(*t).ok());
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 64; ++j) REQUIRE(at(*t, i, j) == at(*t, j, i));
  }
  auto dc = make_scenario("datacenter").value();
  REQUIRE(at(dc, 0, 7) == std::pair{0.0, 100.0});
  REQUIRE(at(dc, 0, 0) == std::pair{0.0, 100.0});
  REQUIRE(at(dc, 7, 8) == std::pair{0.0, 3.125});
  REQUIRE(at(dc, 63, 56) == std::pair{0.0, 100.0});
  auto sp = make_scenario("spot").value();
  REQUIRE(at(sp, 0, 3) == std::pair{0.0, 100.0});
  REQUIRE(at(sp, 3, 4) == std::pair{0.0, 1.25});
  REQUIRE(at(sp, 28, 31) == std::pair{0.0, 100.0});
  REQUIRE(at(sp, 32, 33) == std::pair{0.0, 1.25});
  REQUIRE(at(sp, 40, 40) == std::pair{0.0, 1.25});
  auto un = make_scenario("universities").value();
  REQUIRE(at(un, 0, 0) == std::pair{1.0, 5.0});
  REQUIRE(at(un, 0, 31) == std::pair{1.0, 5.0});
  REQUIRE(at(un, 31, 32) == std::pair{11.0, 1.12});
  REQUIRE(at(un, 32, 63) == std::pair{1.0, 5.0});
  auto rg = make_scenario("regional").value();
  REQUIRE(rg.devices[0].site == "Virginia");
  REQUIRE(rg.devices[16].site == "Oregon");
  REQUIRE(rg.devices[32].site == "California");
  REQUIRE(rg.devices[48].site == "Ohio");
  REQUIRE(at(rg, 0, 15) == std::pair{5.0, 2.0});
  REQUIRE(at(rg, 0, 16) == std::pair{67.0, 1.15});  // regional table, not the world one (0.79)
  REQUIRE(at(rg, 0, 32) == std::pair{59.0, 1.05});
  REQUIRE(at(rg, 0, 48) == std::pair{11.0, 1.12});
  REQUIRE(at(rg, 16, 32) == std::pair{12.0, 1.25});
  REQUIRE(at(rg, 16, 48) == std::pair{49.0, 1.10});
  REQUIRE(at(rg, 32, 48) == std::pair{52.0, 1.02});
  auto wd = make_scenario("world").value();
  const char* cities[] = {"Oregon", "Virginia", "Ohio",      "Tokyo",
                          "Seoul",  "London",   "Frankfurt", "Ireland"};
  for (int i = 0; i < 64; ++i) REQUIRE(wd.devices[i].site == cities[i / 8]);
  REQUIRE(at(wd, 0, 7) == std::pair{5.0, 2.0});
  REQUIRE(at(wd, 0, 8) == std::pair{67.0, 0.79});
  REQUIRE(at(wd, 32, 40) == std::pair{238.0, 0.342});  // Seoul-London
  REQUIRE(at(wd, 48, 56) == std::pair{24.0, 1.08});    // Frankfurt-Ireland
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) {
        auto l = find_region_link(cities[a], cities[b]).value();
        REQUIRE(at(wd, a * 8 + 1, b * 8 + 2) == std::pair{l.latency_ms, l.bandwidth_gbps});
      }
  auto bad = make_scenario("mars");
  REQUIRE(!bad.ok());
  REQUIRE(bad.error().code == paco::errc::not_found);
  REQUIRE(bad.error().message.find("world") != std::string::npos);
}

TEST_CASE("validate names the bad entry", "[place][topology]") {
  topology t;
  t.devices.resize(2);
  t.latency_ms = {0, 1, 1, 0};
  t.bandwidth_gbps = {0, 1, -2, 0};
  auto s = validate(t);
  REQUIRE(!s.ok());
  REQUIRE(s.error().message.find("bandwidth_gbps[1][0]") != std::string::npos);
  t.bandwidth_gbps = {0, 1, 0, 0};
  REQUIRE(!validate(t).ok());  // zero off the diagonal
  t.bandwidth_gbps = {0, 1, 1};
  REQUIRE(validate(t).error().message.find("N*N") != std::string::npos);
  t.bandwidth_gbps = {0, 1, 1, 0};
  REQUIRE(validate(t).ok());
  REQUIRE(!cost_model::make(t, workload{}).ok());  // 2 devices != 8 x 8
  REQUIRE(cost_model::make(t, workload{.d_pp = 2, .d_dp = 1}).ok());
}

// ---------------------------------------------------------------- matching and TSP

TEST_CASE("bottleneck matching equals brute force", "[place][matching]") {
  paco::rng g(7);
  for (int n = 1; n <= 6; ++n)
    for (int trial = 0; trial < 40; ++trial) {
      const bool ties = trial % 2 == 1;
      auto w = random_matrix(n, g, 0, ties ? 4 : 10, ties);
      auto m = bottleneck_matching(w, n);
      REQUIRE(m.value == brute_bottleneck(w, n));
      REQUIRE(is_permutation_of_n(m.col_of_row, n));
      double mx = -INFINITY;
      for (int i = 0; i < n; ++i) mx = std::max(mx, w[i * n + m.col_of_row[i]]);
      REQUIRE(mx == m.value);
    }
}

TEST_CASE("bottleneck matching picks the anti-diagonal when it must", "[place][matching]") {
  // Diagonal is expensive: the only cheap perfect matching is the anti-diagonal.
  std::vector<double> w = {9, 9, 1, 9, 1, 9, 1, 9, 9};
  auto m = bottleneck_matching(w, 3);
  REQUIRE(m.value == 1);
  REQUIRE(m.col_of_row == std::vector<int>{2, 1, 0});
}

TEST_CASE("open-loop and closed Held-Karp equal brute force", "[place][tsp]") {
  paco::rng g(11);
  for (int n = 1; n <= 7; ++n)
    for (int trial = 0; trial < 15; ++trial)
      for (bool closed : {false, true}) {
        auto w = random_matrix(n, g, 0, 10, trial % 3 == 0, trial % 2 == 0);
        tsp_workspace ws;
        auto p = held_karp(w, n, closed, ws);
        REQUIRE(is_permutation_of_n(p.path, n));
        REQUIRE(p.cost == Approx(brute_tsp(w, n, closed)).epsilon(1e-12));
        REQUIRE(p.cost == Approx(path_cost(w, n, p.path, closed)).epsilon(1e-12));
      }
}

TEST_CASE("open-loop TSP takes the best start node", "[place][tsp]") {
  // A line 0 - 1 - 2 - 3 with expensive shortcuts: from start 0 the path is 3, from start 1 more.
  std::vector<double> w(16, 100);
  for (int i = 0; i + 1 < 4; ++i) w[i * 4 + i + 1] = w[(i + 1) * 4 + i] = 1;
  auto p = open_loop_tsp(w, 4);
  REQUIRE(p.cost == 3);
  REQUIRE((p.path == std::vector<int>{0, 1, 2, 3} || p.path == std::vector<int>{3, 2, 1, 0}));
}

// ---------------------------------------------------------------- cost model

TEST_CASE("hand-computed cost on 4 devices", "[place][cost]") {
  // Devices 0,1 at site X and 2,3 at site Y; 10 ms / 4 Gbps inside, 50 ms / 1 Gbps across.
  topology t =
      topology_from_sites({"X", "Y"}, {2, 2}, {10, 10}, {4, 4}, {0, 50, 50, 0}, {0, 1, 1, 0});
  workload w{.d_pp = 2, .d_dp = 2, .c_dp_gb = 1.0, .c_pp_gb = 0.5};
  auto m = cost_model::make(t, w).value();
  // Partitions {0,1} and {2,3}: DP inside a site: 2 (0.010 + 1*8/(4*2)) = 2.02 per device.
  std::vector<int> same_site = {0, 1, 2, 3};
  REQUIRE(m.dp_cost(same_site) == Approx(2.02));
  // PP: every cross edge 0.050 + 0.5*8/1 = 4.05; one hop.
  cost_workspace ws;
  REQUIRE(m.pp_cost(same_site, ws) == Approx(4.05));
  REQUIRE(m.total_cost(same_site) == Approx(2.02 + 2 * 4.05));
  // Partitions {0,2} and {1,3}: DP across: 2 (0.050 + 8/2) = 8.1; PP inside: 0.010 + 4/4 = 1.01.
  std::vector<int> split = {0, 2, 1, 3};
  REQUIRE(m.dp_cost(split) == Approx(8.1));
  REQUIRE(m.pp_cost(split, ws) == Approx(1.01));
  auto p = m.evaluate(split);
  REQUIRE(p.total_s == Approx(8.1 + 2 * 1.01));
  REQUIRE(p.pipelines.size() == 2);
  // Each pipeline stays inside one site.
  for (const auto& pipe : p.pipelines) REQUIRE(t.devices[pipe[0]].site == t.devices[pipe[1]].site);
  // Fixed pairing of {0,2} with {1,3}: 0->1 and 2->3, both inside a site: also 1.01.
  REQUIRE(m.fixed_pp_cost(split) == Approx(1.01));
  // Fixed pairing of {0,2} with {3,1}: 0->3 crosses: 4.05, while matching still finds 1.01.
  std::vector<int> crossed = {0, 2, 3, 1};
  REQUIRE(m.fixed_pp_cost(crossed) == Approx(4.05));
  REQUIRE(m.pp_cost(crossed, ws) == Approx(1.01));
}

TEST_CASE("rank-order cost on the datacenter scenario, by hand", "[place][cost]") {
  auto m = scenario_model("datacenter");
  auto r = rank_order_baseline(m);
  REQUIRE(r.order == [] {
    std::vector<int> v(64);
    std::iota(v.begin(), v.end(), 0);
    return v;
  }());
  const double cpp = 506e6 / 1073741824.0;
  // DP inside an instance: 7 peers * 2 * 0.65*8/(100*8); PP: 7 hops across instances.
  REQUIRE(r.dp_s == Approx(7 * 2 * 0.65 * 8 / 800.0).epsilon(1e-12));
  REQUIRE(r.pp_s == Approx(7 * cpp * 8 / 3.125).epsilon(1e-12));
  REQUIRE(r.cost_s == Approx(r.dp_s + 2 * r.pp_s).epsilon(1e-12));
}

TEST_CASE("world rank-order cost is the sum of the city hops", "[place][cost]") {
  auto m = scenario_model("world");
  auto r = rank_order_baseline(m);
  const char* cities[] = {"Oregon", "Virginia", "Ohio",      "Tokyo",
                          "Seoul",  "London",   "Frankfurt", "Ireland"};
  const double cpp = 506e6 / 1073741824.0;
  double pp = 0;
  for (int s = 0; s + 1 < 8; ++s) {
    auto l = find_region_link(cities[s], cities[s + 1]).value();
    pp += l.latency_ms / 1e3 + cpp * 8 / l.bandwidth_gbps;
  }
  REQUIRE(r.pp_s == Approx(pp).epsilon(1e-12));
  REQUIRE(r.dp_s == Approx(7 * 2 * (0.005 + 0.65 * 8 / 16.0)).epsilon(1e-12));
}

TEST_CASE("evaluate derives consistent pipelines", "[place][cost]") {
  paco::rng g(3);
  for (const char* name : {"datacenter", "regional", "world"}) {
    auto m = scenario_model(name);
    for (int trial = 0; trial < 5; ++trial) {
      auto order = random_order(64, g);
      auto p = m.evaluate(order);
      REQUIRE(p.total_s == Approx(m.total_cost(order)).epsilon(1e-12));
      REQUIRE(p.total_s == Approx(p.dp_s + 2 * p.pp_s).epsilon(1e-12));
      REQUIRE(is_permutation_of_n(p.stage_partition, 8));
      REQUIRE(is_permutation_of_n(p.rank_of_device, 64));
      std::vector<int> all;
      for (std::size_t j = 0; j < p.pipelines.size(); ++j)
        for (std::size_t s = 0; s < p.pipelines[j].size(); ++s) {
          const int d = p.pipelines[j][s];
          all.push_back(d);
          REQUIRE(p.rank_of_device[d] == static_cast<int>(j * 8 + s));
          // Stage s holds exactly the members of partition stage_partition[s].
          const int part = p.stage_partition[s];
          REQUIRE(std::find(order.begin() + part * 8, order.begin() + part * 8 + 8, d) !=
                  order.begin() + part * 8 + 8);
        }
      REQUIRE(is_permutation_of_n(all, 64));
      // The slowest pair of each hop, summed over hops, is the PP cost.
      double pp = 0;
      for (int s = 0; s + 1 < 8; ++s) {
        double worst = 0;
        for (const auto& pipe : p.pipelines)
          worst = std::max(worst, m.pipeline_weight(pipe[s], pipe[s + 1]));
        pp += worst;
      }
      REQUIRE(pp == Approx(p.pp_s).epsilon(1e-12));
      // Matching and TSP never do worse than the fixed pairing in partition order.
      cost_workspace ws;
      REQUIRE(m.pp_cost(order, ws) <= m.fixed_pp_cost(order) + 1e-12);
    }
  }
}

TEST_CASE("PP equals brute force over stage orders and pairings", "[place][cost]") {
  paco::rng g(5);
  for (int trial = 0; trial < 10; ++trial) {
    topology t = random_topology(6, g);
    workload w{.d_pp = 3, .d_dp = 2, .c_dp_gb = 0.65, .c_pp_gb = 0.47};
    auto m = cost_model::make(t, w).value();
    auto order = random_order(6, g);
    // Brute force: every stage order of the 3 partitions and every pairing per hop.
    double best = INFINITY;
    std::vector<int> perm = {0, 1, 2};
    do {
      double pp = 0;
      for (int s = 0; s + 1 < 3; ++s) {
        const int a = perm[s], b = perm[s + 1];
        const int a0 = order[a * 2], a1 = order[a * 2 + 1];
        const int b0 = order[b * 2], b1 = order[b * 2 + 1];
        const double straight = std::max(m.pipeline_weight(a0, b0), m.pipeline_weight(a1, b1));
        const double crossed = std::max(m.pipeline_weight(a0, b1), m.pipeline_weight(a1, b0));
        pp += std::min(straight, crossed);
      }
      best = std::min(best, pp);
    } while (std::next_permutation(perm.begin(), perm.end()));
    cost_workspace ws;
    REQUIRE(m.pp_cost(order, ws) == Approx(best).epsilon(1e-12));
  }
}

// ---------------------------------------------------------------- GCMA and baselines

TEST_CASE("crossover keeps partitions balanced", "[place][gcma]") {
  paco::rng g(9);
  for (int trial = 0; trial < 200; ++trial) {
    auto p1 = random_order(64, g), p2 = random_order(64, g);
    auto child = five_point_crossover(p1, p2, 8, 8, 5, g);
    std::vector<int> sizes(8, 0);
    for (int q : child) ++sizes[q];
    REQUIRE(sizes == std::vector<int>(8, 8));
    auto o = order_of(child, 8);
    REQUIRE(is_permutation_of_n(o, 64));
  }
  auto p1 = random_order(64, g), p2 = random_order(64, g);
  REQUIRE(five_point_crossover(p1, p2, 8, 8, 0, g) == labels_of(p2, 8));
  REQUIRE(five_point_crossover(p1, p2, 8, 8, 64, g) == labels_of(p1, 8));
}

TEST_CASE("cyclic partitioning keeps balance in every gain convention", "[place][gcma]") {
  auto m = scenario_model("world");
  paco::rng g(13);
  for (auto mode : {gain_mode::pipeline, gain_mode::hybrid})
    for (auto sign : {gain_sign::as_written, gain_sign::affinity}) {
      cyclic_partitioning local(m, mode, sign);
      bool changed = false;
      for (int trial = 0; trial < 20; ++trial) {
        auto in = labels_of(random_order(64, g), 8);
        auto out = local.run(in);
        std::vector<int> sizes(8, 0);
        for (int q : out) ++sizes[q];
        REQUIRE(sizes == std::vector<int>(8, 8));
        changed = changed || out != in;
      }
      REQUIRE(changed);  // the local search does move vertices
    }
}

TEST_CASE("GCMA: never worse than its best initial individual; history is consistent",
          "[place][gcma]") {
  auto m = scenario_model("regional");
  for (auto sign : {gain_sign::as_written, gain_sign::affinity}) {
    gcma_config c{.population = 30, .trials = 300, .sign = sign, .seed = 4};
    auto r = gcma(m, c).value();
    REQUIRE(r.best_cost <= r.best_initial_cost);
    REQUIRE(r.best_cost < r.best_initial_cost);  // 300 trials do improve on 30 random shuffles
    REQUIRE(r.evaluations == 330);
    REQUIRE(r.best_so_far.size() == 330);
    REQUIRE(std::is_sorted(r.best_so_far.rbegin(), r.best_so_far.rend()));
    REQUIRE(r.best_so_far[29] == r.best_initial_cost);
    REQUIRE(r.best_so_far.back() == r.best_cost);
    REQUIRE(is_permutation_of_n(r.best_order, 64));
    REQUIRE(m.total_cost(r.best_order) == Approx(r.best_cost).epsilon(1e-12));
  }
}

TEST_CASE("GCMA: identical seeds give identical results", "[place][gcma]") {
  auto m = scenario_model("world");
  gcma_config c{.population = 20, .trials = 200, .seed = 42};
  auto a = gcma(m, c).value();
  auto b = gcma(m, c).value();
  REQUIRE(a.best_order == b.best_order);
  REQUIRE(a.best_so_far == b.best_so_far);
  c.seed = 43;
  auto d = gcma(m, c).value();
  REQUIRE(d.best_so_far != a.best_so_far);
  auto r1 = random_baseline(m, {.samples = 50, .seed = 3}).value();
  auto r2 = random_baseline(m, {.samples = 50, .seed = 3}).value();
  REQUIRE(r1.order == r2.order);
  REQUIRE(r1.cost_s == r2.cost_s);
}

TEST_CASE("GCMA finds the optimum of a tiny instance", "[place][gcma]") {
  paco::rng g(21);
  for (int trial = 0; trial < 5; ++trial) {
    topology t = random_topology(6, g);
    auto m = cost_model::make(t, {.d_pp = 3, .d_dp = 2}).value();
    std::vector<int> p(6);
    std::iota(p.begin(), p.end(), 0);
    double best = INFINITY;
    do best = std::min(best, m.total_cost(p));
    while (std::next_permutation(p.begin(), p.end()));
    // Crossover + replacement alone must reach the optimum of 15 partitions. (With the local
    // search on, offspring collapse onto the few fixed points of the gain heuristic on an
    // instance this small; that is the algorithm, see docs/placement.md.)
    auto r = gcma(m, {.population = 10,
                      .trials = 100,
                      .crossover_points = 2,
                      .local_search = false,
                      .seed = static_cast<std::uint64_t>(trial)})
                 .value();
    REQUIRE(r.best_cost == Approx(best).epsilon(1e-12));
  }
}

TEST_CASE("GCMA rejects bad configs", "[place][gcma]") {
  auto m = scenario_model("world");
  auto r = gcma(m, {.population = 0});
  REQUIRE(!r.ok());
  REQUIRE(r.error().message.find("population") != std::string::npos);
  REQUIRE(!gcma(m, {.trials = -1}).ok());
  REQUIRE(!gcma(m, {.crossover_points = 65}).ok());
  REQUIRE(!random_baseline(m, {.samples = 0}).ok());
}

TEST_CASE("random baseline: its cost bounds the full model of its own order", "[place][gcma]") {
  auto m = scenario_model("universities");
  auto r = random_baseline(m, {.samples = 200, .seed = 8}).value();
  REQUIRE(is_permutation_of_n(r.order, 64));
  REQUIRE(r.cost_s == Approx(m.dp_cost(r.order) + 2 * m.fixed_pp_cost(r.order)));
  REQUIRE(m.total_cost(r.order) <= r.cost_s + 1e-12);
}

TEST_CASE("GCMA beats both baselines on every scenario", "[place][gcma]") {
  for (const char* name : {"datacenter", "spot", "universities", "regional", "world"}) {
    auto m = scenario_model(name);
    auto ours = gcma(m, {.seed = 1}).value();
    auto rnd = random_baseline(m, {.seed = 1}).value();
    auto rank = rank_order_baseline(m);
    INFO(name << " ours " << ours.best_cost << " random " << rnd.cost_s << " rank " << rank.cost_s);
    REQUIRE(ours.best_cost <= rnd.cost_s);
    REQUIRE(ours.best_cost <= rank.cost_s);
  }
}

// ---------------------------------------------------------------- loaders

TEST_CASE("TOML sites form builds the matrices", "[place][file]") {
  const char* text = R"(
[workload]
d_pp = 2
d_dp = 3
c_dp_gb = 0.5

[[site]]
name = "A"
devices = 2
latency_ms = 5
bandwidth_gbps = 2

[[site]]
name = "B"
devices = 4
latency_ms = 1
bandwidth_gbps = 10.5
compute_tflops = 125

[[link]]
a = "B"
b = "A"
latency_ms = 70
bandwidth_gbps = 0.8
)";
  auto d = parse_topology_toml(text, "mem.toml");
  INFO((d.ok() ? "" : d.error().what()));
  REQUIRE(d.ok());
  const topology& t = d->net;
  REQUIRE(t.size() == 6);
  REQUIRE(t.devices[0].name == "A/0");
  REQUIRE(t.devices[5].name == "B/3");
  REQUIRE(t.devices[5].compute_tflops == 125);
  REQUIRE(t.latency(0, 1) == 5);
  REQUIRE(t.bandwidth(2, 5) == 10.5);
  REQUIRE(t.latency(1, 2) == 70);
  REQUIRE(t.bandwidth(4, 0) == 0.8);
  REQUIRE(d->load.has_value());
  REQUIRE(d->load->d_pp == 2);
  REQUIRE(d->load->d_dp == 3);
  REQUIRE(d->load->c_dp_gb == 0.5);
  REQUIRE(d->load->c_pp_gb == workload{}.c_pp_gb);  // default kept
}

TEST_CASE("JSON matrix form equals the TOML matrix form", "[place][file]") {
  auto j = parse_topology_json(
      R"({"latency_ms": [[0, 5, 7], [5, 0, 9], [7, 9, 0]],
          "bandwidth_gbps": [[0, 1, 2], [1, 0, 3], [2, 3, 0]],
          "device": [{"name": "x"}, {"name": "y", "site": "s"}, {}]})");
  auto t = parse_topology_toml(R"(
latency_ms = [[0, 5, 7], [5, 0, 9], [7, 9, 0]]
bandwidth_gbps = [[0, 1.0, 2], [1, 0, 3], [2, 3, 0]]
[[device]]
name = "x"
[[device]]
name = "y"
site = "s"
[[device]]
)");
  REQUIRE(j.ok());
  INFO((t.ok() ? "" : t.error().what()));
  REQUIRE(t.ok());
  REQUIRE(j->net.latency_ms == t->net.latency_ms);
  REQUIRE(j->net.bandwidth_gbps == t->net.bandwidth_gbps);
  REQUIRE(j->net.devices[1].site == "s");
  REQUIRE(t->net.devices[0].name == "x");
  REQUIRE(t->net.devices[2].name == "d2");
  REQUIRE(!j->load.has_value());
}

TEST_CASE("loader errors name the problem", "[place][file]") {
  auto expect = [](const paco::result<topology_document>& r, const std::string& needle) {
    REQUIRE(!r.ok());
    INFO(r.error().what());
    REQUIRE(r.error().message.find(needle) != std::string::npos);
  };
  // Malformed TOML: line and column.
  auto bad = parse_topology_toml("latency_ms = [[0, 1\n", "bad.toml");
  REQUIRE(!bad.ok());
  REQUIRE(bad.error().code == paco::errc::corrupt);
  REQUIRE(bad.error().message.rfind("bad.toml:", 0) == 0);
  REQUIRE(!parse_topology_json("{\"latency_ms\": [", "bad.json").ok());
  // Non-square matrix.
  expect(parse_topology_toml("latency_ms = [[0, 1], [1, 0, 3]]\nbandwidth_gbps = [[0,1],[1,0]]"),
         "not square");
  expect(parse_topology_toml("latency_ms = [[0, 1], [1, 0]]\nbandwidth_gbps = [[0,1,1],[1,0,1],"
                             "[1,1,0]]"),
         "bandwidth_gbps is 3x3");
  // Negative bandwidth, in both forms.
  expect(parse_topology_toml("latency_ms = [[0, 1], [1, 0]]\nbandwidth_gbps = [[0,-1],[1,0]]"),
         "bandwidth_gbps[0][1]");
  expect(parse_topology_toml("[[site]]\nname='A'\ndevices=2\nlatency_ms=1\nbandwidth_gbps=-3\n"),
         "bandwidth_gbps: must be > 0");
  // Strings where numbers belong, unknown keys, missing links, unknown sites.
  expect(
      parse_topology_json(R"({"latency_ms": [[0, "a"], [1, 0]], "bandwidth_gbps": [[0,1],[1,0]]})"),
      "latency_ms[0][1]: expected a number");
  expect(parse_topology_toml("latency_ms = [[0]]\nbandwith_gbps = [[0]]"), "bandwith_gbps");
  expect(parse_topology_toml("[[site]]\nname='A'\ndevices=1\nlatency_ms=1\nbandwidth_gbps=1\n"
                             "[[site]]\nname='B'\ndevices=1\nlatency_ms=1\nbandwidth_gbps=1\n"),
         "missing [[link]] between sites 'A' and 'B'");
  expect(parse_topology_toml("[[site]]\nname='A'\ndevices=1\nlatency_ms=1\nbandwidth_gbps=1\n"
                             "[[link]]\na='A'\nb='C'\nlatency_ms=1\nbandwidth_gbps=1\n"),
         "unknown site 'C'");
  expect(parse_topology_toml("[workload]\nd_pp = 3\n[[site]]\nname='A'\ndevices=4\n"
                             "latency_ms=1\nbandwidth_gbps=1\n"),
         "must equal the number of devices N = 4");
  expect(parse_topology_toml(""), "no network");
  // Files.
  auto missing = load_topology("/nonexistent/dir/t.toml");
  REQUIRE(!missing.ok());
  REQUIRE(missing.error().code == paco::errc::io);
  expect(load_topology("topology.yaml"), "accepted extensions");
}

TEST_CASE("the shipped example topology loads and schedules", "[place][file]") {
  auto d = load_topology(source_dir() + "/examples/configs/topology_example.toml");
  INFO((d.ok() ? "" : d.error().what()));
  REQUIRE(d.ok());
  REQUIRE(d->load.has_value());
  auto m = cost_model::make(d->net, *d->load);
  REQUIRE(m.ok());
  auto r = gcma(*m, {.population = 20, .trials = 100}).value();
  REQUIRE(r.best_cost <= rank_order_baseline(*m).cost_s);
}

// ---------------------------------------------------------------- ring order

TEST_CASE("ring order equals brute force on small instances", "[place][ring]") {
  paco::rng g(17);
  for (int n = 1; n <= 7; ++n)
    for (int trial = 0; trial < 10; ++trial)
      for (bool closed : {false, true}) {
        auto bw = random_matrix(n, g, 0.1, 10, false, trial % 2 == 0);
        auto order = ring_order(bw, n, {.include_closing_edge = closed}).value();
        REQUIRE(is_permutation_of_n(order, n));
        std::vector<double> inv(bw.size(), 0.0);
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < n; ++j)
            if (i != j) inv[i * n + j] = 1.0 / bw[i * n + j];
        REQUIRE(ring_cost(bw, n, order, closed) == Approx(brute_tsp(inv, n, closed)));
      }
}

TEST_CASE("ring order keeps sites together", "[place][ring]") {
  // 8 ranks interleaved over two sites: fast inside a site, slow across.
  const int n = 8;
  std::vector<double> bw(n * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) bw[i * n + j] = (i % 2 == j % 2) ? 10.0 : 0.1;
  auto order = ring_order(bw, n).value();
  int crossings = 0;
  for (int k = 0; k + 1 < n; ++k) crossings += (order[k] % 2 != order[k + 1] % 2);
  REQUIRE(crossings == 1);
  auto ring = ring_order(bw, n, {.include_closing_edge = true}).value();
  crossings = 0;
  for (int k = 0; k < n; ++k) crossings += (ring[k] % 2 != ring[(k + 1) % n] % 2);
  REQUIRE(crossings == 2);
}

TEST_CASE("ring order heuristic above the exact size", "[place][ring]") {
  paco::rng g(19);
  const int n = 9;
  auto bw = random_matrix(n, g, 0.1, 10, false, true);
  auto exact = ring_order(bw, n).value();
  auto heur = ring_order(bw, n, {.exact_max_ranks = 4}).value();
  REQUIRE(is_permutation_of_n(heur, n));
  REQUIRE(ring_cost(bw, n, heur, false) >= ring_cost(bw, n, exact, false) - 1e-12);
  // No worse than nearest neighbour from rank 0.
  std::vector<int> nn = {0};
  std::vector<char> used(n, 0);
  used[0] = 1;
  while (static_cast<int>(nn.size()) < n) {
    int best = -1;
    for (int j = 0; j < n; ++j)
      if (!used[j] && (best < 0 || bw[nn.back() * n + j] > bw[nn.back() * n + best])) best = j;
    used[best] = 1;
    nn.push_back(best);
  }
  REQUIRE(ring_cost(bw, n, heur, false) <= ring_cost(bw, n, nn, false) + 1e-12);
  auto bad = ring_order(std::vector<double>{0, -1, 1, 0}, 2);
  REQUIRE(!bad.ok());
  REQUIRE(bad.error().message.find("bandwidth[0][1]") != std::string::npos);
  REQUIRE(!ring_order(std::vector<double>{0, 1, 1}, 2).ok());
}

// ---------------------------------------------------------------- DiPaCo module placement

TEST_CASE("module placement cost, by hand", "[place][modules]") {
  // One worker, two hosts: host 0 at 10 ms / 8 Gbps, host 1 at 100 ms / 1 Gbps.
  module_problem p{.workers = 1,
                   .hosts = 2,
                   .latency_ms = {10, 100},
                   .bandwidth_gbps = {8, 1},
                   .module_bytes = {1e9, 0.5e9},
                   .paths = {{0, 1}}};
  module_placement_config c{.push_ratio = 0.5};
  // Both on host 0: 0.010 + 1.5e9*8/8e9 = 1.51 (pull); push 0.010 + 0.75 = 0.76.
  auto both0 = evaluate_placement(p, c, {0, 0});
  REQUIRE(both0.pull_s == Approx(1.51));
  REQUIRE(both0.push_s == Approx(0.76));
  REQUIRE(both0.round_s == Approx(2.27));
  // Module 1 on host 1: max(0.010 + 1.0, 0.100 + 4.0) = 4.1 pull.
  REQUIRE(evaluate_placement(p, c, {0, 1}).pull_s == Approx(4.1));
  // A store NIC limit of 4 Gbps on host 0 serialises: 1.5e9*8/4e9 = 3 s.
  p.store_nic_gbps = {4, 0};
  REQUIRE(evaluate_placement(p, c, {0, 0}).pull_s == Approx(3.0));
  auto best = place_modules(p, c).value();
  REQUIRE(best.round_s <= evaluate_placement(p, c, {0, 0}).round_s + 1e-12);
}

TEST_CASE("module placement: never worse than round robin; brute force on tiny instances",
          "[place][modules]") {
  paco::rng g(23);
  for (int trial = 0; trial < 20; ++trial) {
    module_problem p;
    p.workers = 4;
    p.hosts = 3;
    for (int k = 0; k < 12; ++k) {
      p.latency_ms.push_back(1 + 99 * g.uniform());
      p.bandwidth_gbps.push_back(0.1 + 9.9 * g.uniform());
    }
    p.store_nic_gbps = {2 + 8 * g.uniform(), 0, 2 + 8 * g.uniform()};
    for (int m = 0; m < 4; ++m) p.module_bytes.push_back(1e8 * (1 + 9 * g.uniform()));
    // 2 levels x 2 experts: worker w uses expert w%2 of level 0 and w/2 of level 1.
    for (int w = 0; w < 4; ++w) p.paths.push_back({w % 2, 2 + w / 2});
    module_placement_config c{};
    auto ours = place_modules(p, c).value();
    REQUIRE(ours.host_of_shard.size() == 4);
    REQUIRE(ours.round_s <= round_robin_placement(p, c).round_s + 1e-12);
    double brute = INFINITY;
    for (int code = 0; code < 81; ++code) {
      std::vector<int> h = {code % 3, code / 3 % 3, code / 9 % 3, code / 27 % 3};
      brute = std::min(brute, evaluate_placement(p, c, h).round_s);
    }
    REQUIRE(ours.round_s >= brute - 1e-12);
    REQUIRE(ours.round_s <= brute * 1.25);  // local optimum within 25% on these instances
    // Two shards per module: still no worse than round robin, and the reported cost is exact.
    module_placement_config two{.shards_per_module = 2};
    auto sharded = place_modules(p, two).value();
    REQUIRE(sharded.host_of_shard.size() == 8);
    REQUIRE(sharded.round_s <= round_robin_placement(p, two).round_s + 1e-12);
    REQUIRE(sharded.round_s ==
            Approx(evaluate_placement(p, two, sharded.host_of_shard).round_s).epsilon(1e-12));
  }
  module_problem bad{.workers = 1,
                     .hosts = 1,
                     .latency_ms = {1},
                     .bandwidth_gbps = {0},
                     .module_bytes = {1},
                     .paths = {{0}}};
  REQUIRE(!place_modules(bad).ok());
}
