// bench_straggler: workers of different speeds in the multi-process DiPaCo job (paco_train,
// job.mode = "dipaco", grid 2x2: four workers, each module shared by two paths, one store, all
// over TCP on this machine). Runs of the same small job (testing::small_dipaco_job):
//   even              no throttle
//   throttled         worker 4 runs --factor times slower (launch.throttle), blocking rounds:
//                     every module waits for its slowest contributor, and through the shared
//                     modules every worker waits for worker 4
//   throttled_budget  the same, with sync.train_budget_s = --budget (1.2) × the even run's
//                     median training time a round: every worker trains at most that long and
//                     pushes what it trained, weighted by the share of H it reached, so worker 4
//                     takes part in every round with about 1/F of the steps
//   throttled_quorum  the same throttle, rounds closing on a quorum (sync.quorum = one less than
//                     each module's workers: 1 of 2 in the grid, 3 of 4 with --diloco;
//                     sync.grace = 0.5) and late work merged
//                     (sync.max_staleness = 2): a module's round waits for its slow partner
//                     only a grace window past its first push, and the slow worker's pushes,
//                     up to 2 rounds behind, join a later round at weight 1/(1+s)
//   throttled_paced   the same throttle, blocking rounds, sync.pace = "measured": a worker
//                     slower than its modules' push pace (how long after a round opens their
//                     faster workers push, as the store reports it) trains within 1.05 × it
//   throttled_paced_quorum  paced, and the quorum and late merging of throttled_quorum
// Per run: the others' throughput (workers 1-3: rounds per second, 1 / median round_s from
// their logs) and its ratio to the even run's, worker 4's, the rounds closed by deadline and by
// quorum, the longest a round stayed open (store.log), the late pushes merged and dropped (the
// store's counts; slow_merged: those the slow worker's log counts as its own), the routed
// validation bits/byte of the results table, and the wall time.
//
//   bench_straggler [--rounds R (40)] [--factor F (4)] [--budget B (1.2)]
//                   [--round-timeout S (60)] [--diloco] [--rows a,b (all)] [--keep]
// --rows: only these rows besides even (every ratio is to even's throughput).
// --diloco: DiLoCo with P = 4 (dipaco.grid = [1], workers_per_path = 4: one module, four
// workers) instead of the 2x2 grid.
// LAST line: {"bench":"straggler","rows":[{"name":..,"others_rounds_per_s":..,
// "others_ratio":..,"slow_rounds_per_s":..,"deadline_closes":..,"quorum_closes":..,
// "max_open_s":..,"late":..,"merged":..,"slow_merged":..,"bpb":..,"wall_s":..},..],"factor":F,"rounds":R}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/processes.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct row {
  std::string name;
  double others_rounds_per_s = 0, others_ratio = 0, slow_rounds_per_s = 0;
  int deadline_closes = 0, quorum_closes = 0;
  double max_open_s = 0, median_round_s = 0, median_train_s = 0, bpb = 0, wall_s = 0;
  long late = 0, merged = 0, slow_merged = 0;  // slow_merged: the slow worker's own log's count
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One run of the small job with `extra` settings. Errors: a message (the run failed).
std::string run(row& r, int rounds, double round_timeout_s, const std::vector<std::string>& extra,
                bool keep) {
  paco::testing::small_dipaco_run job{PACO_SOURCE_DIR, PACO_BINARY_DIR,
                                      fs::temp_directory_path() / ("paco_straggler_" + r.name)};
  job.rounds = rounds;
  job.round_timeout_s = round_timeout_s;
  std::printf("straggler: %s ...\n", r.name.c_str());
  auto done = paco::testing::run_and_read(job, extra, 4, std::chrono::minutes(30), keep);
  if (!done) return done.error().message;
  r.wall_s = done->wall_s;
  const auto& rep = done->report;
  std::vector<double> others, train_s;
  for (std::size_t w = 0; w < 3; ++w)
    for (std::size_t i = 0; i < std::min(rep.round_s[w].size(), rep.sync_s[w].size()); ++i) {
      others.push_back(rep.round_s[w][i]);
      train_s.push_back(rep.round_s[w][i] - rep.sync_s[w][i]);
    }
  r.median_train_s = median(train_s);
  r.median_round_s = median(others);
  r.others_rounds_per_s = r.median_round_s > 0 ? 1.0 / r.median_round_s : 0;
  r.slow_rounds_per_s = median(rep.round_s[3]) > 0 ? 1.0 / median(rep.round_s[3]) : 0;
  r.max_open_s = rep.max_open_s;
  r.deadline_closes = rep.deadline_closes;
  r.quorum_closes = rep.quorum_closes;
  r.late = rep.late;
  r.merged = rep.merged;
  r.slow_merged = rep.worker_merged[3];
  r.bpb = rep.bpb;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int rounds = 40;
  double factor = 4, budget_frac = 1.2, round_timeout_s = 60;
  bool keep = false, diloco = false;
  std::set<std::string> only;  // --rows: these rows (and even, the reference) only
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_straggler: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rounds")
      rounds = std::atoi(next().c_str());
    else if (a == "--factor")
      factor = std::atof(next().c_str());
    else if (a == "--round-timeout")
      round_timeout_s = std::atof(next().c_str());
    else if (a == "--budget")
      budget_frac = std::atof(next().c_str());
    else if (a == "--keep")
      keep = true;
    else if (a == "--diloco")
      diloco = true;
    else if (a == "--rows") {
      std::stringstream names(next());
      for (std::string n; std::getline(names, n, ',');) only.insert(n);
    } else {
      std::fprintf(stderr,
                   "usage: bench_straggler [--rounds R] [--factor F] [--budget B] "
                   "[--round-timeout S] [--diloco] [--rows a,b] [--keep]\n");
      return 2;
    }
  }
  if (rounds < 2 || !(factor >= 1) || !(budget_frac > 0) || !(round_timeout_s > 0)) {
    std::fprintf(stderr,
                 "bench_straggler: --rounds ≥ 2, --factor ≥ 1, --budget > 0, "
                 "--round-timeout > 0\n");
    return 2;
  }
  std::ostringstream f;
  f << factor;
  // Every row's settings begin with the trainer's.
  const std::vector<std::string> trainer =
      diloco ? std::vector<std::string>{"dipaco.grid=[1]", "dipaco.workers_per_path=4"}
             : std::vector<std::string>{};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), trainer.begin(), trainer.end());
    return extra;
  };
  const std::string throttle = "launch.throttle=\"4:" + f.str() + "\"";
  const std::vector<std::string> quorum{diloco ? "sync.quorum=3" : "sync.quorum=1",
                                        "sync.grace=0.5", "sync.max_staleness=2"};
  const std::string paced = "sync.pace=\"measured\"";
  // Each row's settings besides the trainer's; throttled_budget's budget is set from even's.
  std::vector<std::pair<std::string, std::vector<std::string>>> table{
      {"even", {}},
      {"throttled", {throttle}},
      {"throttled_budget", {throttle}},
      {"throttled_quorum", {throttle}},
      {"throttled_paced", {throttle, paced}},
      {"throttled_paced_quorum", {throttle, paced}}};
  for (auto& [name, extra] : table)
    if (name.ends_with("quorum")) extra.insert(extra.end(), quorum.begin(), quorum.end());
  std::ostringstream budget;
  std::vector<row> rows;
  for (auto& [name, extra] : table) {
    if (name != "even" && !only.empty() && !only.count(name)) continue;
    if (name == "throttled_budget") {
      budget << std::max(0.001, budget_frac * rows[0].median_train_s);
      extra.push_back("sync.train_budget_s=" + budget.str());
    }
    auto& r = rows.emplace_back(row{name});
    if (auto e = run(r, rounds, round_timeout_s, with(extra), keep); !e.empty())
      return std::fprintf(stderr, "bench_straggler: %s: %s\n", name.c_str(), e.c_str()), 1;
  }
  json out{{"bench", "straggler"},
           {"trainer", diloco ? "diloco_p4" : "dipaco_2x2"},
           {"factor", factor},
           {"rounds", rounds},
           {"train_budget_s", budget.str().empty() ? 0.0 : std::stod(budget.str())}};
  std::printf("\n%-22s %12s %8s %12s %9s %7s %8s %5s %7s %7s %7s\n", "run", "others r/s", "ratio",
              "slow r/s", "deadline", "quorum", "max open", "late", "merged", "bpb", "wall s");
  for (auto& r : rows) {
    r.others_ratio =
        rows[0].others_rounds_per_s > 0 ? r.others_rounds_per_s / rows[0].others_rounds_per_s : 0;
    std::printf("%-22s %12.3f %8.3f %12.3f %9d %7d %8.2f %5ld %7ld %7.4f %7.1f\n", r.name.c_str(),
                r.others_rounds_per_s, r.others_ratio, r.slow_rounds_per_s, r.deadline_closes,
                r.quorum_closes, r.max_open_s, r.late, r.merged, r.bpb, r.wall_s);
    out["rows"].push_back({{"name", r.name},
                           {"others_rounds_per_s", r.others_rounds_per_s},
                           {"others_ratio", r.others_ratio},
                           {"slow_rounds_per_s", r.slow_rounds_per_s},
                           {"deadline_closes", r.deadline_closes},
                           {"quorum_closes", r.quorum_closes},
                           {"merged", r.merged},
                           {"slow_merged", r.slow_merged},
                           {"max_open_s", r.max_open_s},
                           {"late", r.late},
                           {"bpb", r.bpb},
                           {"wall_s", r.wall_s}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
