// bench/run local: local losses against global backprop and one process, like for like. Every
// row is paco_train's pipeline job (job.mode = "pipeline", examples/configs/pipeline_brown.toml:
// GPT d = 256, 4 layers, ctx 256, 3.36M parameters, batch 16, the same AdamW, schedule, seed and
// batches) on Brown, scored by the one scorer on --eval-tokens tokens of the test split (the same
// documents for every row; nothing here is chosen on them):
//   single           one process, 2 threads: plain training (pipeline.stages = 1)
//   gpipe_k2         2 stages, global backprop, GPipe with 8 micro-batches
//   1f1b_k2          2 stages, global backprop, 1F1B with 8 micro-batches
//   local_k2         2 stages, local losses (Laskin): stage 0 through a private linear head
//   local_k2_shared  the same through a shared readout (a copy of the last stage's ln_f and head
//                    every 10 steps, applied 2 steps later, and a learnable temperature)
//   local_k4         4 stages of one block, local losses, linear heads
// Two measurements, because the link never changes what is computed (the stages' maths do not
// depend on timing: bit-identical for local losses, tests/pipeline):
//   throughput  each row --tput-steps steps on each link between stages: loopback, 200mbit_20ms
//               (200 Mbit/s + 20 ms one way) and 50mbit_50ms, by paco's per-link shaper;
//               tokens/s = tokens / the slowest stage's training time
//   quality     each row --steps steps on loopback: test bits/byte at equal tokens, and the bytes
//               the stages sent each other
// and, on the slow link, equal wall-clock: the steps local_k2 completes in the time gpipe_k2
// takes for --steps (from their measured tokens/s there), trained (on loopback: the same maths)
// with the cosine schedule over those steps, against gpipe_k2's --steps.
// LAST line: {"bench":"local","rows":[{"name","link","tokens_per_s","bpb",
// "bytes_between_stages"},..],"ratios":{..},"equal_wallclock":{..},..}.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "support/processes.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct link_profile {
  std::string name;
  double mbps, latency_ms;
};
const std::vector<link_profile> all_links{
    {"loopback", 0, 0}, {"200mbit_20ms", 200, 20}, {"50mbit_50ms", 50, 50}};

// Each row's settings over the config's.
const std::map<std::string, std::vector<std::string>> row_sets{
    {"single", {"pipeline.stages=1", "train.threads=2"}},
    {"gpipe_k2", {"pipeline.stages=2", "pipeline.schedule=gpipe", "pipeline.micro_batches=8"}},
    {"1f1b_k2", {"pipeline.stages=2", "pipeline.schedule=1f1b", "pipeline.micro_batches=8"}},
    {"local_k2", {"pipeline.stages=2", "pipeline.schedule=local", "pipeline.head=linear"}},
    {"local_k2_shared",
     {"pipeline.stages=2", "pipeline.schedule=local", "pipeline.head=shared_readout"}},
    {"local_k4", {"pipeline.stages=4", "pipeline.schedule=local", "pipeline.head=linear"}}};

// Runs the pipeline job with `sets`; returns its results.json (throws on a failed run).
json run_job(const fs::path& dir, std::vector<std::string> sets, bool keep) {
  fs::remove_all(dir);
  std::vector<std::string> args{
      (fs::path(PACO_BINARY_DIR) / "examples" / "paco_train" / "paco_train").string(), "-c",
      (fs::path(PACO_SOURCE_DIR) / "examples" / "configs" / "pipeline_brown.toml").string()};
  sets.push_back("output.dir=" + dir.string());
  for (auto& s : sets) args.insert(args.end(), {"--set", s});
  const fs::path out = dir.string() + ".out";
  const auto pid = paco::testing::spawn_logged(args, out, {});
  const int code = paco::testing::exit_code(paco::testing::wait_exit(pid, std::chrono::hours(2)));
  if (code != 0)
    throw std::runtime_error("run in " + dir.string() + " failed (exit " + std::to_string(code) +
                             "); its output: " + out.string());
  std::ifstream f(dir / "results.json");
  if (!f)
    throw std::runtime_error("run in " + dir.string() +
                             " left no results.json; its output: " + out.string());
  json r = json::parse(f);
  if (!keep) fs::remove_all(dir), fs::remove(out);
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"bench/run local: local losses vs global backprop vs one process"};
  long steps = 500, tput_steps = 40, eval_tokens = 200000;
  std::vector<std::string> rows{"single",   "gpipe_k2",        "1f1b_k2",
                                "local_k2", "local_k2_shared", "local_k4"};
  std::vector<std::string> links{"loopback", "200mbit_20ms", "50mbit_50ms"};
  bool keep = false;
  std::string work = "/tmp/paco_bench_local";
  app.add_option("--steps", steps, "steps of each quality run (equal tokens)");
  app.add_option("--tput-steps", tput_steps, "steps of each throughput run");
  app.add_option("--eval-tokens", eval_tokens, "test tokens the one scorer reads");
  app.add_option("--rows", rows, "rows to run")->delimiter(',');
  app.add_option("--links", links, "links between stages")->delimiter(',');
  app.add_option("--dir", work, "where the runs go");
  app.add_flag("--keep", keep, "keep every run's directory");
  CLI11_PARSE(app, argc, argv);
  for (auto& r : rows)
    if (!row_sets.count(r)) throw std::runtime_error("no row named '" + r + "'");
  const std::string eval = "pipeline.eval_tokens=" + std::to_string(eval_tokens);
  fs::create_directories(work);

  // Throughput: every row on every link (one process has no link: loopback only).
  std::map<std::string, std::map<std::string, json>> tput;
  for (const auto& name : rows)
    for (const auto& l : all_links) {
      if (std::find(links.begin(), links.end(), l.name) == links.end()) continue;
      if (name == "single" && l.name != "loopback") continue;
      auto sets = row_sets.at(name);
      sets.insert(sets.end(),
                  {"train.steps=" + std::to_string(tput_steps), "pipeline.eval_tokens=1000",
                   "pipeline.link_mbps=" + std::to_string(l.mbps),
                   "pipeline.link_latency_ms=" + std::to_string(l.latency_ms)});
      auto r = run_job(fs::path(work) / ("tput_" + name + "_" + l.name), sets, keep);
      std::fprintf(stderr, "throughput %-16s %-13s %8.0f tokens/s\n", name.c_str(), l.name.c_str(),
                   r["tokens_per_s"].get<double>());
      tput[name][l.name] = r;
    }
  // Quality at equal tokens.
  std::map<std::string, json> quality;
  for (const auto& name : rows) {
    auto sets = row_sets.at(name);
    sets.insert(sets.end(), {"train.steps=" + std::to_string(steps), eval});
    auto r = run_job(fs::path(work) / ("quality_" + name), sets, keep);
    std::fprintf(stderr, "quality    %-16s test %.4f bits/byte, %.1f MB between stages, %.0f s\n",
                 name.c_str(), r["test_bpb"].get<double>(),
                 r["bytes_between_stages"].get<double>() / 1e6, r["train_s"].get<double>());
    quality[name] = r;
  }
  json out{{"bench", "local"},
           {"steps", steps},
           {"tput_steps", tput_steps},
           {"tokens", double(steps) * 16 * 256},
           {"eval_tokens", eval_tokens}};
  json jrows = json::array();
  for (const auto& name : rows)
    for (const auto& [lname, r] : tput[name])
      jrows.push_back({{"name", name},
                       {"link", lname},
                       {"tokens_per_s", r["tokens_per_s"]},
                       {"bpb", quality[name]["test_bpb"]},
                       {"bytes_between_stages", quality[name]["bytes_between_stages"]},
                       {"stage_loss_bpb", quality[name]["stage_loss_bpb"]}});
  out["rows"] = jrows;
  auto tps = [&](const std::string& n, const std::string& l) {
    return tput.count(n) && tput[n].count(l) ? tput[n][l]["tokens_per_s"].get<double>() : 0.0;
  };
  auto bpb = [&](const std::string& n) {
    return quality.count(n) ? quality[n]["test_bpb"].get<double>() : 0.0;
  };
  auto ratio = [](double a, double b) { return b > 0 && a > 0 ? json(a / b) : json(); };
  out["ratios"] = {
      {"loopback_gpipe_over_single", ratio(tps("gpipe_k2", "loopback"), tps("single", "loopback"))},
      {"loopback_local_over_gpipe",
       ratio(tps("local_k2", "loopback"), tps("gpipe_k2", "loopback"))},
      {"loopback_local_over_single", ratio(tps("local_k2", "loopback"), tps("single", "loopback"))},
      {"slow_local_over_gpipe",
       ratio(tps("local_k2", "50mbit_50ms"), tps("gpipe_k2", "50mbit_50ms"))},
      {"slow_local_over_1f1b",
       ratio(tps("local_k2", "50mbit_50ms"), tps("1f1b_k2", "50mbit_50ms"))},
      {"mid_local_kept", ratio(tps("local_k2", "200mbit_20ms"), tps("local_k2", "loopback"))},
      {"bpb_local_over_gpipe", ratio(bpb("local_k2"), bpb("gpipe_k2"))},
      {"bpb_shared_over_gpipe", ratio(bpb("local_k2_shared"), bpb("gpipe_k2"))},
      {"bpb_k4_over_gpipe", ratio(bpb("local_k4"), bpb("gpipe_k2"))}};
  // Equal wall-clock on the slow link.
  const double g = tps("gpipe_k2", "50mbit_50ms"), lk = tps("local_k2", "50mbit_50ms");
  if (g > 0 && lk > 0 && quality.count("gpipe_k2")) {
    const long local_steps = long(double(steps) * lk / g);
    auto sets = row_sets.at("local_k2");
    sets.insert(sets.end(), {"train.steps=" + std::to_string(local_steps), eval});
    auto r = run_job(fs::path(work) / "wallclock_local_k2", sets, keep);
    out["equal_wallclock"] = {
        {"link", "50mbit_50ms"},         {"wall_s", double(steps) * 16 * 256 / g},
        {"gpipe_k2_steps", steps},       {"gpipe_k2_bpb", bpb("gpipe_k2")},
        {"local_k2_steps", local_steps}, {"local_k2_bpb", r["test_bpb"]}};
    std::fprintf(stderr,
                 "equal wall-clock on 50mbit_50ms: gpipe_k2 %ld steps %.4f, local_k2 %ld "
                 "steps %.4f bits/byte\n",
                 steps, bpb("gpipe_k2"), local_steps, r["test_bpb"].get<double>());
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_local: %s\n", e.what());
  return 1;
}
