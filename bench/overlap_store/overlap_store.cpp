// bench_overlap_store: the sync rules through the module store (paco_train's multi-process job:
// one store and four worker processes over TCP on this machine), DiPaCo 2×2 and DiLoCo with four
// workers on one path, every link shaped by paco's per-link shaper (launch.link_mbps).
//
// For each trainer and regime, rows of the same job (testing::small_dipaco_job with a GPT of
// d = 64, 4 layers, ctx 128, batch 8, a base model of 50 steps; the same seeds, the same outer
// Nesterov step on the store) that differ only in sync.mode and
// the link:
//   compute_only   blocking over unshaped loopback: what a round costs with a free link
//   blocking       DiLoCo / DiPaCo rounds: push, wait, pull, then the next inner steps
//   co2            the push, the wait and the pull of round r behind round r+1's inner steps;
//                  each worker goes on from its own θ and the store's step lands one round late
//   eager          the same, the own Δ standing in for its share 1/k of the mean
//   naive_delayed  the same overlap, each worker restarting from the late global modules
// The link rate is set from the compute_only run so that one round's transfer (the fp32 push up
// and the pull down of the worker's modules) takes --comm-ratio × its inner steps' time.
// Regimes: few (--rounds × --inner) and many (--many-rounds × --many-inner, the same steps).
// Per row: the median round time over every worker's rounds after the first (a worker log's
// round_s: the time between two of its rounds, under every rule) and its ratio to compute_only's,
// the median time a round waited on sync, the routed validation bits/byte of the job's results
// table (its one scorer; no setting here is chosen on it), the bytes the workers sent, and the wall
// time of the run.
//
//   bench_overlap_store [--rounds R (12)] [--inner H (40)] [--many-rounds (96)]
//                       [--many-inner (5)] [--comm-ratio C (0.5)] [--trainers dipaco,diloco]
//                       [--keep]
// LAST line: {"bench":"overlap_store","rows":[{"trainer":..,"regime":..,"name":..,
// "wall_ratio":..,"round_s":..,"sync_s":..,"bpb":..,"bytes":..,"link_mbps":..,"wall_s":..},..],
// "comm_ratio":C}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/testing/processes.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct row {
  std::string trainer, regime, name;
  double link_mbps = 0, round_s = 0, train_s = 0, sync_s = 0, bpb = 0, bytes = 0, wall_s = 0;
  double wall_ratio = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string num(double x) {
  std::ostringstream o;
  o.precision(10);
  o << x;
  return o.str();
}

// One run of the job with `extra` settings into r. Errors: a message (the run failed).
std::string run(row& r, int rounds, int inner, const std::vector<std::string>& extra, bool keep) {
  paco::testing::small_dipaco_run job{
      PACO_SOURCE_DIR, PACO_BINARY_DIR,
      fs::temp_directory_path() /
          ("paco_overlap_store_" + r.trainer + "_" + r.regime + "_" + r.name)};
  job.rounds = rounds;
  job.round_timeout_s = 120;
  fs::remove_all(job.dir);
  // A model big enough that a round's inner steps take seconds on two cores (the small job's is
  // too small for the link to matter), the rest as the small job has it.
  std::vector<std::string> args{"--set", "dipaco.inner_steps=" + std::to_string(inner),
                                "--set", "model.d=64",
                                "--set", "model.layers=4",
                                "--set", "model.heads=4",
                                "--set", "model.ctx=128",
                                "--set", "train.batch=8",
                                "--set", "dipaco.pretrain_steps=50"};
  if (r.trainer == "diloco")
    args.insert(args.end(), {"--set", "dipaco.grid=[1]", "--set", "dipaco.workers_per_path=4"});
  for (auto& kv : extra) args.insert(args.end(), {"--set", kv});
  std::printf("overlap_store: %s %s %s (link %s Mbit/s) ...\n", r.trainer.c_str(), r.regime.c_str(),
              r.name.c_str(), r.link_mbps > 0 ? num(r.link_mbps).c_str() : "∞");
  const auto t0 = std::chrono::steady_clock::now();
  const auto [code, out] = job.run(args, {}, std::chrono::minutes(30));
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (code != 0) return "exit " + std::to_string(code) + "; output in " + job.out().string();
  std::vector<double> round_s, sync_s, train_s;
  for (int w = 1; w <= 4; ++w) {
    auto rs = paco::testing::worker_log_values(job.dir, w, "round_s");
    auto ss = paco::testing::worker_log_values(job.dir, w, "sync_s");
    // The first round holds the start-up (connect, first pull): left out.
    for (std::size_t i = 1; i < std::min(rs.size(), ss.size()); ++i) {
      round_s.push_back(rs[i]);
      sync_s.push_back(ss[i]);
      train_s.push_back(rs[i] - ss[i]);
    }
  }
  r.round_s = median(round_s);
  r.sync_s = median(sync_s);
  r.train_s = median(train_s);
  // "| all (routed) |  61 |  3.8265 |  4.217 MB |"
  static const std::regex all_re(
      R"(all \(routed\) *\| *[0-9]+ *\| *([0-9]+\.[0-9]+) *\| *([0-9.]+) MB)");
  std::smatch m;
  if (!std::regex_search(out, m, all_re)) return "no results table in " + job.out().string();
  r.bpb = std::stod(m[1]);
  r.bytes = std::stod(m[2]) * 1e6;
  if (!keep) {
    fs::remove_all(job.dir);
    fs::remove(job.out());
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int rounds = 12, inner = 40, many_rounds = 96, many_inner = 5;
  double comm_ratio = 0.5;
  std::vector<std::string> trainers{"dipaco", "diloco"};
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_overlap_store: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rounds")
      rounds = std::atoi(next().c_str());
    else if (a == "--inner")
      inner = std::atoi(next().c_str());
    else if (a == "--many-rounds")
      many_rounds = std::atoi(next().c_str());
    else if (a == "--many-inner")
      many_inner = std::atoi(next().c_str());
    else if (a == "--comm-ratio")
      comm_ratio = std::atof(next().c_str());
    else if (a == "--trainers") {
      trainers.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) trainers.push_back(t);
    } else if (a == "--keep")
      keep = true;
    else {
      std::fprintf(stderr,
                   "usage: bench_overlap_store [--rounds R] [--inner H] [--many-rounds R] "
                   "[--many-inner H] [--comm-ratio C] [--trainers dipaco,diloco] [--keep]\n");
      return 2;
    }
  }
  if (rounds < 3 || inner < 1 || many_rounds < 3 || many_inner < 1 || !(comm_ratio > 0)) {
    std::fprintf(stderr,
                 "bench_overlap_store: --rounds and --many-rounds ≥ 3, --inner and --many-inner "
                 "≥ 1, --comm-ratio > 0\n");
    return 2;
  }
  for (auto& t : trainers)
    if (t != "dipaco" && t != "diloco")
      return std::fprintf(stderr, "bench_overlap_store: trainer '%s': dipaco or diloco\n",
                          t.c_str()),
             2;
  std::vector<row> rows;
  for (const auto& trainer : trainers) {
    for (const auto& [regime, r_count, h] :
         {std::tuple{std::string("few"), rounds, inner},
          std::tuple{std::string("many"), many_rounds, many_inner}}) {
      row base{trainer, regime, "compute_only"};
      if (auto e = run(base, r_count, h, {}, keep); !e.empty())
        return std::fprintf(stderr, "bench_overlap_store: %s\n", e.c_str()), 1;
      base.wall_ratio = 1;
      rows.push_back(base);
      // The rate at which a round's push up and pull down (each about bytes / (4 workers ×
      // rounds) on its link) take comm_ratio × the inner steps' time.
      const double per_round = base.bytes / (4.0 * r_count);
      const double mbps = 2 * per_round * 8 / 1e6 / (comm_ratio * std::max(1e-3, base.train_s));
      for (const char* mode : {"blocking", "co2", "eager", "naive_delayed"}) {
        row r{trainer, regime, mode, mbps};
        if (auto e = run(
                r, r_count, h,
                {std::string("sync.mode=\"") + mode + "\"", "launch.link_mbps=" + num(mbps)}, keep);
            !e.empty())
          return std::fprintf(stderr, "bench_overlap_store: %s\n", e.c_str()), 1;
        r.wall_ratio = base.round_s > 0 ? r.round_s / base.round_s : 0;
        rows.push_back(r);
      }
    }
  }
  json out{{"bench", "overlap_store"}, {"comm_ratio", comm_ratio}};
  std::printf("\n%-7s %-5s %-14s %9s %8s %8s %8s %8s %10s %8s\n", "trainer", "regime", "row",
              "link Mb/s", "round s", "ratio", "sync s", "bpb", "bytes", "wall s");
  for (const auto& r : rows) {
    std::printf("%-7s %-5s %-14s %9.2f %8.3f %8.3f %8.3f %8.4f %10.0f %8.1f\n", r.trainer.c_str(),
                r.regime.c_str(), r.name.c_str(), r.link_mbps, r.round_s, r.wall_ratio, r.sync_s,
                r.bpb, r.bytes, r.wall_s);
    out["rows"].push_back({{"trainer", r.trainer},
                           {"regime", r.regime},
                           {"name", r.name},
                           {"wall_ratio", r.wall_ratio},
                           {"round_s", r.round_s},
                           {"sync_s", r.sync_s},
                           {"bpb", r.bpb},
                           {"bytes", r.bytes},
                           {"link_mbps", r.link_mbps},
                           {"wall_s", r.wall_s}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
