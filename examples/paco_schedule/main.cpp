// paco_schedule: DT-FM placement of D_PP x D_DP tasklets on a heterogeneous network.
//
//   paco_schedule --scenario world --seed 1
//   paco_schedule --topology examples/configs/topology_example.toml
//   paco_schedule --scenario world8 --placement-out gcma.json      # a scaled scenario (8 devices)
//   paco_schedule --scenario world8 --placement-out r3.json --placement random:3
//
// --placement-out writes a placement file (place/placement_file.hpp) that paco_emulate executes:
// GCMA's (default), the rank-order launcher's, or a random order's (random:SEED, DT-FM's
// pipelines through it), with the cost model's prediction for its pipelines.
// Prints the best cost found by GCMA, the random and rank-order baselines, the pipelines (one
// line per pipeline, stage 0 first) and the time taken. Bad input gives a one-line error naming
// the problem and a non-zero exit status.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include "paco/core/rng.hpp"
#include "paco/io/progress.hpp"
#include "paco/place/place.hpp"
#include "paco/place/placement_file.hpp"
#include "paco/place/scaled.hpp"

namespace {

int fail(const std::string& what, int code = 2) {
  std::fprintf(stderr, "paco_schedule: error: %s\n", what.c_str());
  return code;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int argc, char** argv) {
  using namespace paco::place;
  CLI::App app{"DT-FM placement: GCMA search vs random and rank-order baselines"};
  std::string scenario, topology_path;
  std::uint64_t seed = 1;
  gcma_config cfg;
  random_baseline_config rnd;
  std::string mode = "pipeline", sign = "as_written";
  int d_pp = 0, d_dp = 0;
  bool quiet = false, show_ranks = false;
  auto* o_scen = app.add_option("--scenario", scenario,
                                "built-in network: datacenter, spot, universities, regional, "
                                "world, homogeneous");
  auto* o_topo = app.add_option("--topology", topology_path, "topology file (.toml or .json)");
  o_scen->excludes(o_topo);
  long long seed_arg = 1;
  app.add_option("--seed", seed_arg, "random seed (GCMA and random baseline), >= 0")
      ->capture_default_str();
  app.add_option("--population", cfg.population, "GCMA population size")->capture_default_str();
  app.add_option("--trials", cfg.trials, "GCMA offspring to generate")->capture_default_str();
  auto* o_points =
      app.add_option("--crossover-points", cfg.crossover_points,
                     "positions copied from parent 1 (default 5, at most the device count)");
  app.add_option("--gain-mode", mode, "local-search gain: pipeline (paper) or hybrid")
      ->check(CLI::IsMember({"pipeline", "hybrid"}))
      ->capture_default_str();
  app.add_option("--gain-sign", sign, "gain sign: as_written (code) or affinity (negated)")
      ->check(CLI::IsMember({"as_written", "affinity"}))
      ->capture_default_str();
  app.add_flag(
      "--no-local-search", [&](std::int64_t) { cfg.local_search = false; }, "crossover only");
  app.add_option("--random-samples", rnd.samples, "samples of the random baseline")
      ->capture_default_str();
  app.add_option("--d-pp", d_pp, "override the pipeline degree (stages)");
  app.add_option("--d-dp", d_dp, "override the data-parallel degree");
  app.add_flag("--quiet", quiet, "no progress display");
  app.add_flag("--ranks", show_ranks, "also print the rank of every device");
  std::string placement_out, which = "gcma";
  app.add_option("--placement-out", placement_out,
                 "write a placement file (for paco_emulate) of the placement --placement names");
  app.add_option("--placement", which, "gcma (default), rank_order or random:SEED")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (seed_arg < 0) return fail("--seed = " + std::to_string(seed_arg) + ": must be >= 0");
  seed = static_cast<std::uint64_t>(seed_arg);
  if (scenario.empty() == topology_path.empty())
    return fail("give exactly one of --scenario NAME or --topology FILE");
  cfg.seed = seed;
  rnd.seed = seed;
  cfg.mode = mode == "hybrid" ? gain_mode::hybrid : gain_mode::pipeline;
  cfg.sign = sign == "affinity" ? gain_sign::affinity : gain_sign::as_written;

  topology net;
  workload load;
  std::string label;
  const bool scaled = std::find(scaled_scenario_names().begin(), scaled_scenario_names().end(),
                                scenario) != scaled_scenario_names().end();
  if (scaled) {
    auto sc = make_scaled_scenario(scenario);
    if (!sc) return fail(sc.error().message);
    net = sc->net;
    load = sc->load;
    label = "scaled scenario " + scenario;
  } else if (!scenario.empty()) {
    auto t = make_scenario(scenario);
    if (!t) return fail(t.error().message);
    net = std::move(*t);
    label = "scenario " + scenario;
  } else {
    auto d = load_topology(topology_path);
    if (!d) return fail(d.error().message);
    net = std::move(d->net);
    if (d->load) load = *d->load;
    label = "topology " + topology_path;
  }
  if (d_pp > 0) load.d_pp = d_pp;
  if (d_dp > 0) load.d_dp = d_dp;
  auto model = cost_model::make(net, load);
  if (!model) {
    std::string hint;
    if (model.error().message.rfind("workload", 0) == 0)
      hint = " (set d_pp and d_dp in the file's [workload] table or with --d-pp/--d-dp)";
    return fail(model.error().message + hint);
  }
  if (o_points->count() == 0) cfg.crossover_points = std::min(cfg.crossover_points, net.size());
  if (auto s = validate(cfg, *model); !s) return fail(s.error().message);
  if (rnd.samples < 1) return fail("--random-samples must be >= 1");

  std::printf(
      "%s: %d devices, D_PP = %d stages x D_DP = %d shards, c_dp = %.4f GB, "
      "c_pp = %.4f GB\n",
      label.c_str(), net.size(), load.d_pp, load.d_dp, load.c_dp_gb, load.c_pp_gb);
  std::printf("GCMA: population %d, %d trials, gain %s/%s, seed %llu\n", cfg.population, cfg.trials,
              mode.c_str(), sign.c_str(), static_cast<unsigned long long>(seed));
  std::fflush(stdout);

  auto t0 = std::chrono::steady_clock::now();
  paco::io::progress bar("GCMA", cfg.trials > 0 ? cfg.trials : 1);
  gcma_progress report;
  if (!quiet && cfg.trials > 0)
    report = [&](int done, int, double best) {
      char text[48];
      std::snprintf(text, sizeof text, "best %.3f s", best);
      bar.update(done, text);
    };
  auto ours = gcma(*model, cfg, report);
  if (!ours) return fail(ours.error().message);
  const double search_s = seconds_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  auto random = random_baseline(*model, rnd);
  if (!random) return fail(random.error().message);
  const double random_s = seconds_since(t1);
  const auto rank = rank_order_baseline(*model);
  const plan best = model->evaluate(ours->best_order);

  std::printf("\n%-22s %10s %10s %10s\n", "placement", "cost (s)", "DP (s)", "2*PP (s)");
  std::printf("%-22s %10.3f %10.3f %10.3f\n", "GCMA (ours)", best.total_s, best.dp_s,
              2 * best.pp_s);
  std::printf("%-22s %10.3f %10.3f %10.3f   ours is %.2fx lower\n", "random baseline",
              random->cost_s, random->dp_s, 2 * random->pp_s, random->cost_s / best.total_s);
  std::printf("%-22s %10.3f %10.3f %10.3f   ours is %.2fx lower\n", "rank-order baseline",
              rank.cost_s, rank.dp_s, 2 * rank.pp_s, rank.cost_s / best.total_s);
  std::printf("\nbest initial individual: %.3f s; candidates scored: %lld\n",
              ours->best_initial_cost, ours->evaluations);
  std::printf("time: GCMA search %.3f s, random baseline (%d samples) %.3f s\n", search_s,
              rnd.samples, random_s);
  std::printf("\npipelines (stage 0 -> %d); stage s runs partition stage_partition[s] = ",
              load.d_pp - 1);
  for (int p : best.stage_partition) std::printf("%d ", p);
  std::printf("\n");
  for (std::size_t j = 0; j < best.pipelines.size(); ++j) {
    std::printf("  pipeline %zu:", j);
    for (std::size_t s = 0; s < best.pipelines[j].size(); ++s)
      std::printf("%s %s", s ? " ->" : "", net.devices[best.pipelines[j][s]].name.c_str());
    std::printf("\n");
  }
  if (!placement_out.empty()) {
    std::vector<int> order;
    bool matched = true;
    if (which == "gcma") {
      order = ours->best_order;
    } else if (which == "rank_order") {
      order = rank.order;
      matched = false;
    } else if (which.rfind("random:", 0) == 0) {
      std::uint64_t rs = 0;
      try {
        rs = std::stoull(which.substr(7));
      } catch (const std::exception&) {
        return fail("--placement " + which + ": SEED must be a number");
      }
      paco::rng g(rs);
      order = random_order(net.size(), g);
    } else {
      return fail("--placement " + which + ": expected gcma, rank_order or random:SEED");
    }
    const auto pl = placement_of(*model, net, load, order, matched,
                                 scenario.empty() ? topology_path : scenario, which);
    if (auto s = write_placement(placement_out, pl); !s) return fail(s.error().message);
    std::printf("placement %s written to %s: predicted %.3f s (DP %.3f, 2*PP %.3f)\n",
                which.c_str(), placement_out.c_str(), pl.total_s, pl.dp_s, 2 * pl.pp_s);
  }
  if (show_ranks) {
    std::printf("rank of device (rank = pipeline * D_PP + stage):\n");
    for (int d = 0; d < net.size(); ++d)
      std::printf("  %-16s %d\n", net.devices[d].name.c_str(), best.rank_of_device[d]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return fail(std::string("unexpected failure: ") + e.what(), 1);
  }
}
