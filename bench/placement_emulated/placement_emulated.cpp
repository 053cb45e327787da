// bench/run placement_emulated: DT-FM placements executed on emulated links, against the cost
// model. For each scaled scenario (place/scaled.hpp) it computes GCMA's placement, the rank-order
// launcher's and `--random` random orders' (DT-FM's pipelines through each), writes each as a
// placement file and runs it with paco_emulate (8 device processes over TCP on this machine, every
// link shaped as the scenario's, scaled) in each mode: as_modelled (the cost model's own traffic:
// its prediction is s × DT-FM's cost) and native (GPipe with M = 4 and a ring all-reduce per
// stage group: its prediction is paco's own time models; DT-FM's cost is reported beside it).
// Per row: median measured and predicted seconds of an iteration. Per scenario and mode: Spearman
// ρ of measured against predicted across placements, and GCMA's speed-up over rank order,
// measured and predicted. LAST line: one JSON object.
//
//   bench/run placement_emulated [--scenarios world8,regional8] [--random 10] [--iterations 5]
//                                [--modes as_modelled,native] [--scale-s 0.1]

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "paco/core/rng.hpp"
#include "paco/core/stats.hpp"
#include "paco/place/place.hpp"
#include "paco/place/placement_file.hpp"
#include "paco/place/scaled.hpp"
#include "support/processes.hpp"

using namespace paco;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> split(const std::string& csv) {
  std::vector<std::string> out;
  std::size_t b = 0;
  for (std::size_t e; (e = csv.find(',', b)) != std::string::npos; b = e + 1)
    out.push_back(csv.substr(b, e - b));
  out.push_back(csv.substr(b));
  return out;
}

std::string cpu_model() {
  const std::string info = testing::slurp("/proc/cpuinfo");
  const auto at = info.find("model name");
  if (at == std::string::npos) return "unknown";
  const auto colon = info.find(':', at), end = info.find('\n', at);
  return info.substr(colon + 2, end - colon - 2);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> scenarios{"world8", "regional8"}, modes{"as_modelled", "native"};
  int randoms = 10, iterations = 5;
  std::string scale_s = "0.1";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--scenarios")
      scenarios = split(v);
    else if (k == "--modes")
      modes = split(v);
    else if (k == "--random")
      randoms = std::stoi(v);
    else if (k == "--iterations")
      iterations = std::stoi(v);
    else if (k == "--scale-s")
      scale_s = v;
    else
      return std::fprintf(stderr, "unknown option %s\n", k.c_str()), 2;
  }
  const fs::path dir =
      fs::temp_directory_path() / ("paco_bench_placement_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::printf(
      "placement_emulated: %s; paco_emulate per placement and mode: 8 device processes, "
      "1 warm-up + %d iterations, s = %s, f = 1/1024\n",
      cpu_model().c_str(), iterations, scale_s.c_str());
  nlohmann::json rows = nlohmann::json::array(), per = nlohmann::json::object();
  double min_rho = 1, gcma_meas = 0, gcma_pred = 0;
  for (const auto& name : scenarios) {
    auto sc = place::make_scaled_scenario(name, {std::stod(scale_s), 1.0 / 1024});
    if (!sc) return std::fprintf(stderr, "%s\n", sc.error().what().c_str()), 2;
    auto m = place::cost_model::make(sc->net, sc->load).value_or_throw();
    std::vector<place::placement> plans;
    auto ours = place::gcma(m, {.seed = 1}).value_or_throw();
    plans.push_back(place::placement_of(m, sc->net, sc->load, ours.best_order, true, name, "gcma"));
    plans.push_back(place::placement_of(m, sc->net, sc->load, place::rank_order_baseline(m).order,
                                        false, name, "rank_order"));
    for (int r = 1; r <= randoms; ++r) {
      rng g{std::uint64_t(r)};
      plans.push_back(place::placement_of(m, sc->net, sc->load, place::random_order(sc->size(), g),
                                          true, name, "random:" + std::to_string(r)));
    }
    for (const auto& mode : modes) {
      std::vector<double> measured, predicted;
      std::printf("\n%s, %s\n%-12s %12s %12s %8s\n", name.c_str(), mode.c_str(), "placement",
                  "measured s", "predicted s", "ratio");
      for (std::size_t i = 0; i < plans.size(); ++i) {
        const fs::path file = dir / (name + "-" + std::to_string(i) + ".json");
        place::write_placement(file, plans[i]).throw_if_error();
        const fs::path log = dir / "emulate.out";
        // A run whose devices could not all meet (a port taken by another program) is run again
        // once, saying so.
        nlohmann::json j;
        for (int attempt = 0; attempt < 2; ++attempt) {
          const auto pid = testing::spawn_logged(
              {PACO_EMULATE, "--scenario", name, "--placement", file.string(), "--mode", mode,
               "--iterations", std::to_string(iterations), "--scale-s", scale_s},
              log);
          const int code = testing::exit_code(testing::wait_exit(pid, std::chrono::minutes(30)));
          const std::string out = testing::slurp(log);
          fs::remove(log);
          const auto nl = out.rfind('\n', out.size() - 2);
          j = nlohmann::json::parse(out.substr(nl == std::string::npos ? 0 : nl + 1), nullptr,
                                    false);
          if (code == 0 && !j.is_discarded()) break;
          std::fprintf(stderr, "paco_emulate failed (%d)%s:\n%s\n", code,
                       attempt ? "" : "; running it again", out.c_str());
          if (attempt) return 3;
        }
        measured.push_back(j["measured_s"]);
        predicted.push_back(j["predicted_s"]);
        std::printf("%-12s %12.4f %12.4f %8.3f\n", plans[i].method.c_str(), measured.back(),
                    predicted.back(), measured.back() / predicted.back());
        std::fflush(stdout);
        nlohmann::json row = j;
        rows.push_back(row);
      }
      const double rho = stats::spearman(measured, predicted);
      const double sp_meas = measured[1] / measured[0], sp_pred = predicted[1] / predicted[0];
      std::printf(
          "Spearman rho %.3f; GCMA over rank order: measured %.3fx, predicted %.3fx "
          "(ratio %.3f)\n",
          rho, sp_meas, sp_pred, sp_meas / sp_pred);
      per[name][mode] = {{"spearman", rho},
                         {"gcma_speedup_measured", sp_meas},
                         {"gcma_speedup_predicted", sp_pred}};
      if (mode == "as_modelled") {
        if (std::isnan(rho) || rho < min_rho) min_rho = rho;  // a NaN ρ is reported as such
        if (name == scenarios.front()) gcma_meas = sp_meas, gcma_pred = sp_pred;
      }
    }
  }
  fs::remove_all(dir);
  std::printf("%s\n", nlohmann::json{{"bench", "placement_emulated"},
                                     {"cpu", cpu_model()},
                                     {"rows", rows},
                                     {"spearman", min_rho},
                                     {"gcma_speedup_measured", gcma_meas},
                                     {"gcma_speedup_predicted", gcma_pred},
                                     {"per_scenario", per}}
                          .dump()
                          .c_str());
  return 0;
}
