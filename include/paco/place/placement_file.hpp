#pragma once
// placement_file: a placement as a file that paco_schedule writes and an executed run reads —
// which device runs stage s of pipeline j, for a named (scaled) scenario, with what DT-FM's cost
// model predicts for it. A file that does not match the run's topology or world size is refused
// naming the field.
//
//   {"format": "paco-placement-1", "scenario": "world8", "n": 8, "d_pp": 4, "d_dp": 2,
//    "method": "gcma", "pipelines": [[0, 2, 4, 6], [1, 3, 5, 7]],
//    "predicted": {"dp_s": 1.1, "pp_s": 2.3, "total_s": 5.7}}      (modelled seconds)
//
// Stage s's data-parallel group is {pipelines[j][s] : j}; pipeline j sends its activations from
// stage s to s + 1 (forward) and back. predicted_cost computes the cost of such a placement from
// the pipelines themselves (a second implementation of the cost model: equal to
// cost_model::evaluate's for GCMA's pipelines and to the fixed pairing's for rank order, tested;
// with asymmetric links evaluate prices a hop in the direction of the lower partition index, this
// in the pipeline's own direction).
//
// read_placement refuses a file nested deeper than io::json_max_depth levels and checks every
// integer (n, d_pp, d_dp, the devices) for type and range before narrowing (io/json_read.hpp):
// "n": 4294967304 is not 8 devices, and "n": 8.9 is not 8.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/json_read.hpp"
#include "paco/place/cost.hpp"
#include "paco/place/topology.hpp"

namespace paco::place {

// The most devices a placement may have (validate_placement, read_placement).
inline constexpr int placement_max_devices = 4096;

struct placement {
  std::string scenario;  // the (scaled) scenario it was computed for
  std::string method;    // gcma, rank_order, random:<seed>, …
  int n = 0, d_pp = 0, d_dp = 0;
  std::vector<std::vector<int>> pipelines;  // (d_dp)(d_pp): device of pipeline j, stage s
  double dp_s = 0, pp_s = 0, total_s = 0;   // DT-FM's predicted cost, modelled seconds

  // The devices of stage s's data-parallel group, pipeline order.
  std::vector<int> group(int s) const {
    std::vector<int> g;
    for (const auto& p : pipelines) g.push_back(p[std::size_t(s)]);
    return g;
  }
  // Where device d sits: {pipeline, stage}. Requires: a valid placement, 0 ≤ d < n.
  std::pair<int, int> where(int d) const {
    for (int j = 0; j < d_dp; ++j)
      for (int s = 0; s < d_pp; ++s)
        if (pipelines[std::size_t(j)][std::size_t(s)] == d) return {j, s};
    return {-1, -1};
  }
};

// The cost model's figures for the placement's own pipelines: COST_DP over its stage groups
// (each device exchanging a 1/D shard with every group peer, twice, one after another),
// PP = Σ over hops s → s+1 of the slowest pipeline's transfer, total = COST_DP + 2·PP.
// Requires: p's pipelines valid for t and w (validate_placement).
inline void predicted_cost(const topology& t, const workload& w, placement& p) {
  const int D = p.d_dp, K = p.d_pp;
  double dp = 0;
  for (int s = 0; s < K; ++s) {
    const auto g = p.group(s);
    for (int a : g) {
      double sum = 0;
      for (int b : g)
        if (a != b) sum += 2 * (t.latency(a, b) / 1e3 + w.c_dp_gb * 8 / (D * t.bandwidth(a, b)));
      dp = std::max(dp, sum);
    }
  }
  double pp = 0;
  for (int s = 0; s + 1 < K; ++s) {
    double worst = 0;
    for (const auto& pl : p.pipelines)
      worst = std::max(worst, t.transfer_s(pl[std::size_t(s)], pl[std::size_t(s) + 1], w.c_pp_gb));
    pp += worst;
  }
  p.dp_s = dp;
  p.pp_s = pp;
  p.total_s = dp + 2 * pp;
}

// A placement from an order (partition s = order[s·D, (s+1)·D)): with `matched`, DT-FM's own
// pipelines (bottleneck matchings chained along the TSP path: cost_model::evaluate); without,
// the fixed pairing of a rank-order launcher (stage s = partition s, member j feeds member j).
inline placement placement_of(const cost_model& m, const topology& t, const workload& w,
                              const std::vector<int>& order, bool matched, std::string scenario,
                              std::string method) {
  placement p{std::move(scenario), std::move(method), t.size(), w.d_pp, w.d_dp, {}, 0, 0, 0};
  if (matched) {
    p.pipelines = m.evaluate(order).pipelines;
  } else {
    p.pipelines.assign(std::size_t(w.d_dp), std::vector<int>(std::size_t(w.d_pp)));
    for (int j = 0; j < w.d_dp; ++j)
      for (int s = 0; s < w.d_pp; ++s)
        p.pipelines[std::size_t(j)][std::size_t(s)] = order[std::size_t(s) * w.d_dp + j];
  }
  predicted_cost(t, w, p);
  return p;
}

// Ensures: ok iff p fits a world of n devices and degrees d_pp × d_dp (when given, ≥ 1) and its
// pipelines hold every device 0 … n−1 once; the error names the field (placement.<field>).
inline status validate_placement(const placement& p, int n = 0, int d_pp = 0, int d_dp = 0) {
  auto bad = [](const std::string& m) { return status(errc::invalid_argument, "placement." + m); };
  if (n > 0 && p.n != n)
    return bad("n: the placement is for " + std::to_string(p.n) + " devices, this run has " +
               std::to_string(n));
  if (d_pp > 0 && p.d_pp != d_pp)
    return bad("d_pp: " + std::to_string(p.d_pp) + " stages, this run has " + std::to_string(d_pp));
  if (d_dp > 0 && p.d_dp != d_dp)
    return bad("d_dp: " + std::to_string(p.d_dp) + " pipelines, this run has " +
               std::to_string(d_dp));
  if (p.n < 1 || p.n > placement_max_devices)
    return bad("n: " + std::to_string(p.n) + " devices (1 … " +
               std::to_string(placement_max_devices) + " accepted)");
  if (p.d_pp < 1 || p.d_dp < 1 || std::int64_t(p.d_pp) * p.d_dp != p.n)
    return bad("d_pp, d_dp: " + std::to_string(p.d_pp) + " × " + std::to_string(p.d_dp) +
               " must be the " + std::to_string(p.n) + " devices");
  if (int(p.pipelines.size()) != p.d_dp)
    return bad("pipelines: " + std::to_string(p.pipelines.size()) + " pipelines, d_dp is " +
               std::to_string(p.d_dp));
  std::vector<int> seen(std::size_t(std::max(p.n, 0)), 0);
  for (std::size_t j = 0; j < p.pipelines.size(); ++j) {
    if (int(p.pipelines[j].size()) != p.d_pp)
      return bad("pipelines[" + std::to_string(j) + "]: " + std::to_string(p.pipelines[j].size()) +
                 " stages, d_pp is " + std::to_string(p.d_pp));
    for (std::size_t s = 0; s < p.pipelines[j].size(); ++s) {
      const int d = p.pipelines[j][s];
      const std::string at =
          "pipelines[" + std::to_string(j) + "][" + std::to_string(s) + "] = " + std::to_string(d);
      if (d < 0 || d >= p.n) return bad(at + ": not a device 0.." + std::to_string(p.n - 1));
      if (seen[std::size_t(d)]++) return bad(at + ": the device is placed twice");
    }
  }
  return {};
}

inline status write_placement(const std::filesystem::path& file, const placement& p) {
  nlohmann::json j{{"format", "paco-placement-1"},
                   {"scenario", p.scenario},
                   {"method", p.method},
                   {"n", p.n},
                   {"d_pp", p.d_pp},
                   {"d_dp", p.d_dp},
                   {"pipelines", p.pipelines},
                   {"predicted", {{"dp_s", p.dp_s}, {"pp_s", p.pp_s}, {"total_s", p.total_s}}}};
  return io::write_file_atomic(file, j.dump(1) + "\n");
}

// Reads and validates a placement file (validate_placement with n, d_pp, d_dp when given).
// Errors name the file and the field: not_found; too_large (nested deeper than
// io::json_max_depth levels); corrupt (not JSON, not a placement, a field of the wrong type: an
// integer field that holds 8.9 or "8"); invalid_argument (n, d_pp, d_dp outside
// [1, placement_max_devices], a device outside [0, placement_max_devices), checked before
// narrowing; validate_placement's).
inline result<placement> read_placement(const std::filesystem::path& file, int n = 0, int d_pp = 0,
                                        int d_dp = 0) {
  std::ifstream in(file);
  if (!in) return error(errc::not_found, "no placement file '" + file.string() + "'");
  const std::string where = "placement file '" + file.string() + "': ";
  auto parsed = io::json_parse(in, "placement file '" + file.string() + "'");
  if (!parsed && parsed.error().code != make_error_code(errc::corrupt)) return parsed.error();
  if (!parsed || !parsed->is_object() || !parsed->contains("format") ||
      !(*parsed)["format"].is_string() ||
      (*parsed)["format"].get<std::string>() != "paco-placement-1")
    return error(errc::corrupt, where + "not a paco-placement-1 JSON file");
  const nlohmann::json& j = *parsed;
  placement p;
  // Each field read by name, so that a missing or mistyped one is named.
  std::string field;
  try {
    const auto get = [&](const nlohmann::json& obj, const std::string& k,
                         const std::string& name) -> const nlohmann::json& {
      field = name;
      return obj.at(k);
    };
    p.scenario = get(j, "scenario", "scenario").get<std::string>();
    p.method = j.contains("method") ? get(j, "method", "method").get<std::string>() : "";
    for (auto [k, dst] :
         {std::pair{"n", &p.n}, std::pair{"d_pp", &p.d_pp}, std::pair{"d_dp", &p.d_dp}}) {
      auto v = io::json_int(get(j, k, k), std::string("placement.") + k, 1, placement_max_devices);
      if (!v) return error(v.error().code, where + v.error().message);
      *dst = *v;
    }
    const auto& pl = get(j, "pipelines", "pipelines");
    if (!pl.is_array())
      return error(errc::corrupt, where + "placement.pipelines: expected an array of pipelines");
    for (std::size_t a = 0; a < pl.size(); ++a) {
      auto devices = io::json_ints(pl[a], "placement.pipelines[" + std::to_string(a) + "]", 0,
                                   placement_max_devices - 1);
      if (!devices) return error(devices.error().code, where + devices.error().message);
      p.pipelines.push_back(std::move(*devices));
    }
    const auto& pr = get(j, "predicted", "predicted");
    p.dp_s = get(pr, "dp_s", "predicted.dp_s").get<double>();
    p.pp_s = get(pr, "pp_s", "predicted.pp_s").get<double>();
    p.total_s = get(pr, "total_s", "predicted.total_s").get<double>();
  } catch (const std::exception& e) {
    return error(errc::corrupt, where + "placement." + field +
                                    " is missing or of the wrong type (" + e.what() + ")");
  }
  if (auto s = validate_placement(p, n, d_pp, d_dp); !s)
    return error(s.error().code, where + s.error().message);
  return p;
}

}  // namespace paco::place
