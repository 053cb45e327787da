// bench_schedule: for each DT-FM scenario and seeds 1..3, the GCMA cost (population 100, 4900
// trials, the paper's gain), the random baseline (5000 samples), the rank-order baseline and the
// GCMA wall time; then the gain variants on seed 1. Costs are the simulated communication
// seconds of ALGORITHMS.md §1.2 (baselines under their own fixed-pairing pipeline model).
// Last line: {"bench":"schedule","rows":[...]}.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "paco/place/baselines.hpp"
#include "paco/place/cost.hpp"
#include "paco/place/gcma.hpp"
#include "paco/place/scenarios.hpp"

using namespace paco::place;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct row {
  std::string scenario;
  int seed;
  double cost_s, random_cost_s, rank_order_cost_s, wall_s;
};

}  // namespace

int main() {
  const char* scenarios[] = {"datacenter", "spot", "universities", "regional", "world"};
  std::vector<row> rows;
  std::printf(
      "# DT-FM placement: GCMA (population 100, 4900 trials, gain pipeline/as_written) vs\n"
      "# random baseline (5000 samples) and rank-order (Megatron-style contiguous DP "
      "groups).\n# Costs: simulated communication seconds per iteration "
      "(COST_DP + 2 PP), lower is better.\n");
  std::printf("%-13s %4s %10s %10s %10s %8s %8s %8s\n", "scenario", "seed", "ours_s", "random_s",
              "rank_s", "rnd/ours", "rank/ours", "wall_s");
  double max_wall = 0;
  bool all_le = true;
  for (const char* name : scenarios) {
    auto model = cost_model::make(make_scenario(name).value(), workload{}).value();
    for (int seed = 1; seed <= 3; ++seed) {
      auto t0 = std::chrono::steady_clock::now();
      auto ours = gcma(model, {.seed = static_cast<std::uint64_t>(seed)}).value();
      const double wall = seconds_since(t0);
      auto rnd = random_baseline(model, {.samples = 5000, .seed = static_cast<std::uint64_t>(seed)})
                     .value();
      auto rank = rank_order_baseline(model);
      rows.push_back({name, seed, ours.best_cost, rnd.cost_s, rank.cost_s, wall});
      max_wall = std::max(max_wall, wall);
      all_le = all_le && ours.best_cost <= rnd.cost_s && ours.best_cost <= rank.cost_s;
      std::printf("%-13s %4d %10.3f %10.3f %10.3f %8.2f %8.2f %8.3f\n", name, seed, ours.best_cost,
                  rnd.cost_s, rank.cost_s, rnd.cost_s / ours.best_cost,
                  rank.cost_s / ours.best_cost, wall);
      std::fflush(stdout);
    }
  }
  std::printf(
      "# ours <= both baselines on every row: %s; slowest full GCMA search: %.3f s "
      "(target <= 20 s, one core)\n",
      all_le ? "yes" : "NO", max_wall);

  // Gain variants (ALGORITHMS.md §1.3 defect 4), seeds 1..3: best cost per seed.
  struct variant {
    const char* label;
    gcma_config c;
  };
  const variant variants[] = {
      {"pipeline/as_written", {}},
      {"pipeline/affinity", {.sign = gain_sign::affinity}},
      {"hybrid/as_written", {.mode = gain_mode::hybrid}},
      {"hybrid/affinity", {.mode = gain_mode::hybrid, .sign = gain_sign::affinity}},
      {"no local search", {.local_search = false}},
  };
  std::printf("# gain variants: best cost (s) for seeds 1 2 3, mean wall (s)\n");
  for (const char* name : scenarios) {
    auto model = cost_model::make(make_scenario(name).value(), workload{}).value();
    for (const auto& v : variants) {
      std::printf("%-13s %-20s", name, v.label);
      double wall = 0;
      for (int seed = 1; seed <= 3; ++seed) {
        gcma_config c = v.c;
        c.seed = static_cast<std::uint64_t>(seed);
        auto t0 = std::chrono::steady_clock::now();
        auto r = gcma(model, c).value();
        wall += seconds_since(t0);
        std::printf(" %8.3f", r.best_cost);
      }
      std::printf("   %.3f\n", wall / 3);
      std::fflush(stdout);
    }
  }

  // A simple lower bound on COST: every device exchanges with D-1 peers (DP) and every
  // pipeline crosses K-1 hops, none cheaper than the cheapest link. It caps rank-order/ours.
  std::printf("# lower bound on COST = min_d sum of its D-1 cheapest DP pairs + 2 (K-1) min w\n");
  for (const char* name : scenarios) {
    auto t = make_scenario(name).value();
    auto model = cost_model::make(t, workload{}).value();
    const int n = model.size(), D = model.d_dp(), K = model.d_pp();
    double dp_lb = INFINITY, w_min = INFINITY;
    for (int d = 0; d < n; ++d) {
      std::vector<double> pairs;
      for (int e = 0; e < n; ++e)
        if (e != d) {
          pairs.push_back(
              2 * (t.latency(d, e) / 1e3 + model.load().c_dp_gb * 8 / (t.bandwidth(d, e) * D)));
          w_min = std::min(w_min, model.pipeline_weight(d, e));
        }
      std::sort(pairs.begin(), pairs.end());
      double sum = 0;
      for (int k = 0; k < D - 1; ++k) sum += pairs[static_cast<std::size_t>(k)];
      dp_lb = std::min(dp_lb, sum);
    }
    const double lb = dp_lb + 2 * (K - 1) * w_min;
    const double rank = rank_order_baseline(model).cost_s;
    std::printf(
        "# %-13s lower bound %8.3f s; rank-order / lower bound = %.2f (the most any "
        "placement can gain)\n",
        name, lb, rank / lb);
  }

  std::printf("{\"bench\":\"schedule\",\"rows\":[");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    std::printf(
        "%s{\"scenario\":\"%s\",\"seed\":%d,\"cost_s\":%.6f,\"random_cost_s\":%.6f,"
        "\"rank_order_cost_s\":%.6f,\"wall_s\":%.4f}",
        i ? "," : "", r.scenario.c_str(), r.seed, r.cost_s, r.random_cost_s, r.rank_order_cost_s,
        r.wall_s);
  }
  std::printf("]}\n");
  return 0;
}
