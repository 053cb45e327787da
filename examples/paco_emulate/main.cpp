// paco_emulate: a DT-FM placement executed on emulated links, against the cost model.
//
//   paco_schedule --scenario world8 --placement-out p.json
//   paco_emulate --scenario world8 --placement p.json            # 8 device processes, 1 + 5 its
//   paco_emulate --scenario world8 --placement p.json --mode native --micro-batches 4
//
// The launcher starts one process per device of the scaled scenario (place/scaled.hpp) on this
// machine. Each joins two TCP groups: the data links, every one shaped by paco's per-peer shaper
// as the scenario's link between the two devices, scaled (α·s, bandwidth·f/s, payloads·f), and an
// unshaped control group for the barriers and the timings. They replay the placement's iteration
// as the cost model describes it (place/replay.hpp: activations hop by hop along every pipeline,
// forward and back, then each stage group's data-parallel exchanges), a warm-up and then
// --iterations measured ones. With --mode native they run it as paco would instead (GPipe with M
// micro-batches along every pipeline, then a ring all-reduce in each stage group; compute a fixed
// sleep per micro-batch, --compute-ms, 0 by default as the cost model ignores it). The launcher
// prints, per phase and in total, the median measured time, the prediction (as modelled: s × the
// cost model's figure for the placement's pipelines; native: paco's own time models, and DT-FM's
// cost beside them) and their ratio; its LAST line is one JSON object.
//
// Errors: a placement file for another scenario or world size is refused naming the field
// (exit 2); a device process that fails makes the launcher stop the others and exit 3.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "paco/core/stats.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/place/placement_file.hpp"
#include "paco/place/replay.hpp"
#include "paco/place/scaled.hpp"
#include "support/processes.hpp"

namespace {

using namespace paco;
namespace fs = std::filesystem;

int fail(int code, const std::string& m) {
  std::fprintf(stderr, "paco_emulate: %s\n", m.c_str());
  return code;
}

std::vector<std::string> split(const std::string& csv, char sep = ',') {
  std::vector<std::string> out;
  std::size_t b = 0;
  for (std::size_t e; (e = csv.find(sep, b)) != std::string::npos; b = e + 1)
    out.push_back(csv.substr(b, e - b));
  out.push_back(csv.substr(b));
  return out;
}

// A command name as a path: itself when it holds a '/', else the first executable of that name on
// PATH (unchanged when none: starting it then fails with its name).
std::string on_path(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return cmd;
  const char* path = std::getenv("PATH");
  for (const auto& dir : split(path ? path : "/usr/bin:/bin", ':'))
    if (const auto f = fs::path(dir) / cmd; access(f.c_str(), X_OK) == 0) return f.string();
  return cmd;
}

struct args {
  std::string scenario = "world8", placement, out, mode = "as_modelled", hosts, wrap;
  bool kernel_rates = false;
  int micro_batches = 4;
  double compute_ms = 0;
  std::string data_peers, control_peers;
  int rank = -1, iterations = 5, warmup = 1;
  double s = 0.1, f = 1.0 / 1024;
  std::size_t burst = 4096;
};

place::native_options native_options_of(const args& a, const place::scaled_scenario& sc) {
  const auto compute = std::chrono::microseconds(std::llround(a.compute_ms * 1000));
  return {.pp_bytes = sc.pp_bytes(),
          .dp_bytes = sc.dp_bytes(),
          .micro_batches = a.micro_batches,
          .forward_compute = compute,
          .backward_compute = 2 * compute};
}

// The payload bytes of one iteration (both modes move the same): activations both ways along
// every pipeline, and in every stage group each device's 2 (D − 1) shards of c_dp / D.
std::size_t payload_bytes(const place::scaled_scenario& sc, const place::placement& p) {
  const std::size_t K = std::size_t(p.d_pp), D = std::size_t(p.d_dp);
  return 2 * D * (K - 1) * sc.pp_bytes() + K * D * 2 * (D - 1) * (sc.dp_bytes() / D);
}

// One device: both groups, the replays, rank 0 writes every iteration's times to a.out.
int run_device(const args& a, const place::scaled_scenario& sc, const place::placement& p) {
  const auto data_peers = split(a.data_peers), control_peers = split(a.control_peers);
  const int n = sc.size();
  if (int(data_peers.size()) != n || int(control_peers.size()) != n)
    return fail(2, "--data-peers and --control-peers need " + std::to_string(n) + " entries");
  net::tcp_options o;
  o.rank = a.rank;
  o.size = n;
  o.token = std::getenv("PACO_TOKEN") ? std::getenv("PACO_TOKEN") : "";
  o.connect_timeout = std::chrono::milliseconds(60000);
  o.peer_timeout = std::chrono::milliseconds(30000);
  net::tcp_options data = o, control = o;
  data.peers = data_peers;
  control.peers = control_peers;
  for (int j = 0; j < n; ++j)
    if (j != a.rank) {
      const auto l = sc.link(a.rank, j);
      net::shaper_options sh;
      sh.rate_bytes_per_s = a.kernel_rates ? 0 : l.rate_bytes_per_s;
      sh.burst_bytes = a.burst;
      sh.latency = std::chrono::microseconds(std::llround(l.latency_s * 1e6));
      data.peer_shapers[j] = sh;
    }
  auto d = net::asio_tcp::connect(data);
  if (!d) return fail(3, "device " + std::to_string(a.rank) + ": data links: " + d.error().what());
  auto c = net::asio_tcp::connect(control);
  if (!c) return fail(3, "device " + std::to_string(a.rank) + ": control: " + c.error().what());
  const place::replay_options ro{.pp_bytes = sc.pp_bytes(), .dp_bytes = sc.dp_bytes()};
  std::ofstream out;
  if (a.rank == 0) out.open(a.out);
  // One iteration of the mode; its record (rank 0 writes it).
  const auto no = native_options_of(a, sc);
  const auto iteration = [&](int it) -> result<nlohmann::json> {
    if (a.mode == "native") {
      auto t = place::replay_native(**d, **c, p, no, it);
      if (!t) return t.error();
      return nlohmann::json{
          {"pipeline_s", t->pipeline_s}, {"dp_s", t->dp_s}, {"total_s", t->total_s()}};
    }
    auto t = place::replay_as_modelled(**d, **c, p, ro, it);
    if (!t) return t.error();
    return nlohmann::json{{"forward_s", t->forward_s},
                          {"backward_s", t->backward_s},
                          {"dp_s", t->dp_s},
                          {"total_s", t->total_s()},
                          {"forward_hops", t->forward_hops}};
  };
  for (int it = 0; it < a.warmup + a.iterations; ++it) {
    auto rec = iteration(it);
    if (!rec) return fail(3, "device " + std::to_string(a.rank) + ": " + rec.error().what());
    (*rec)["iteration"] = it;
    (*rec)["warmup"] = it < a.warmup;
    if (a.rank == 0) out << rec->dump() << "\n" << std::flush;
  }
  (*d)->close();
  (*c)->close();
  return 0;
}

// The median of each key over rank 0's records after the warm-up (times), then dir removed.
// Errors: fewer records than --iterations, with rank 0's log.
result<std::map<std::string, double>> medians(const args& a, const fs::path& times,
                                              const fs::path& dir,
                                              const std::vector<std::string>& keys) {
  std::map<std::string, std::vector<double>> cols;
  std::ifstream in(times);
  int records = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("warmup", true)) continue;
    ++records;
    for (const auto& k : keys) cols[k].push_back(j.value(k, 0.0));
  }
  const std::string log = testing::slurp(dir / "device-0.log");
  fs::remove_all(dir);
  if (records != a.iterations)
    return error(errc::protocol, "rank 0 recorded " + std::to_string(records) + " of " +
                                     std::to_string(a.iterations) + " iterations; its log:\n" +
                                     log);
  std::map<std::string, double> out;
  for (const auto& k : keys) out[k] = stats::median(cols[k]);
  return out;
}

// The launcher's report of a native run (times: rank 0's records).
int report_native(const args& a, const place::scaled_scenario& sc, const place::placement& p,
                  const fs::path& times, const fs::path& dir) {
  auto med = medians(a, times, dir, {"pipeline_s", "dp_s", "total_s"});
  if (!med) return fail(3, med.error().what());
  const double pipe = (*med)["pipeline_s"], dp = (*med)["dp_s"], total = (*med)["total_s"];
  const auto no = native_options_of(a, sc);
  const auto pred = place::predict_native(p, no, [&](int i, int j) { return sc.link(i, j); });
  const double s = sc.scale.s;
  std::printf(
      "%s, placement %s (%s), native: GPipe M = %d, compute %.1f ms forward / %.1f ms "
      "backward per micro-batch, ring all-reduce per stage group; s = %g; median of %d "
      "iterations after %d warm-up\n",
      sc.name.c_str(), p.method.c_str(), a.placement.c_str(), a.micro_batches, a.compute_ms,
      2 * a.compute_ms, s, a.iterations, a.warmup);
  std::printf("%-10s %12s %14s %8s %12s\n", "phase", "measured s", "paco model s", "ratio",
              "DT-FM s");
  const auto row = [](const char* name, double m, double pr, double dt) {
    std::printf("%-10s %12.4f %14.4f %8.3f %12.4f\n", name, m, pr, pr > 0 ? m / pr : 0.0, dt);
  };
  row("pipeline", pipe, pred.pipeline_s, s * 2 * p.pp_s);
  row("dp", dp, pred.dp_s, s * p.dp_s);
  row("total", total, pred.total_s(), s * p.total_s);
  std::printf("%s\n", nlohmann::json{{"scenario", sc.name},
                                     {"mode", "native"},
                                     {"placement", p.method},
                                     {"measured_s", total},
                                     {"predicted_s", pred.total_s()},
                                     {"dtfm_s", s * p.total_s},
                                     {"pipeline_s", pipe},
                                     {"dp_s", dp},
                                     {"predicted_pipeline_s", pred.pipeline_s},
                                     {"predicted_dp_s", pred.dp_s},
                                     {"payload_bytes", payload_bytes(sc, p)}}
                          .dump()
                          .c_str());
  return 0;
}

int run_launcher(const args& a, const char* self, const place::scaled_scenario& sc,
                 const place::placement& p) {
  const int n = sc.size();
  if (!std::getenv("PACO_TOKEN")) setenv("PACO_TOKEN", "paco-emulate", 1);
  // Every device on loopback, or on the hosts given (ports 7401 and 7402 each). On loopback the
  // ports lie below the kernel's ephemeral range (32768 and up), so that no connection's own
  // port can take one before its device listens; which of them, from this process's id.
  const auto hosts = a.hosts.empty() ? std::vector<std::string>{} : split(a.hosts);
  if (!hosts.empty() && int(hosts.size()) != n)
    return fail(2, "--hosts names " + std::to_string(hosts.size()) + " hosts for " +
                       std::to_string(n) + " devices");
  const int base = 12000 + int(getpid() % 1000) * 2 * n;
  std::string data, control;
  for (int r = 0; r < n; ++r) {
    const std::string h = hosts.empty() ? "127.0.0.1" : hosts[std::size_t(r)];
    data += (r ? "," : "") + h + ":" + std::to_string(hosts.empty() ? base + r : 7401);
    control += (r ? "," : "") + h + ":" + std::to_string(hosts.empty() ? base + n + r : 7402);
  }
  const fs::path dir = fs::temp_directory_path() / ("paco_emulate_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path times = dir / "times.jsonl";
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    char sbuf[32], fbuf[32];
    std::snprintf(sbuf, sizeof sbuf, "%.17g", a.s);
    std::snprintf(fbuf, sizeof fbuf, "%.17g", a.f);
    // --wrap: a command that runs each device's process (e.g. in its own network namespace).
    std::vector<std::string> args;
    std::string word;
    for (char ch : a.wrap + " ") {
      if (ch != ' ') {
        word += ch;
        continue;
      }
      if (word.empty()) continue;
      for (std::size_t at; (at = word.find("{r}")) != std::string::npos;)
        word.replace(at, 3, std::to_string(r));
      args.push_back(word);
      word.clear();
    }
    const std::vector<std::string> own{self,
                                       "--scenario",
                                       a.scenario,
                                       "--placement",
                                       a.placement,
                                       "--rank",
                                       std::to_string(r),
                                       "--data-peers",
                                       data,
                                       "--control-peers",
                                       control,
                                       "--iterations",
                                       std::to_string(a.iterations),
                                       "--warmup",
                                       std::to_string(a.warmup),
                                       "--scale-s",
                                       sbuf,
                                       "--scale-f",
                                       fbuf,
                                       "--burst",
                                       std::to_string(a.burst),
                                       "--out",
                                       times.string(),
                                       "--mode",
                                       a.mode,
                                       "--micro-batches",
                                       std::to_string(a.micro_batches),
                                       "--compute-ms",
                                       std::to_string(a.compute_ms)};
    args.insert(args.end(), own.begin(), own.end());
    if (a.kernel_rates) args.push_back("--kernel-rates");
    args[0] = on_path(args[0]);
    const pid_t pid = testing::spawn_logged(args, dir / ("device-" + std::to_string(r) + ".log"));
    if (pid < 0) {
      for (pid_t k : kids) kill(k, SIGTERM);
      return fail(3, "cannot start device " + std::to_string(r) + " ('" + args[0] + "')");
    }
    kids.push_back(pid);
  }
  int worst = 0;
  for (std::size_t r = 0; r < kids.size(); ++r) {
    const int code = testing::exit_code(testing::wait_exit(kids[r], std::chrono::minutes(30)));
    if (code != 0) {
      if (worst == 0)
        for (pid_t k : kids) kill(k, SIGTERM);
      worst = code;
      std::fprintf(stderr, "paco_emulate: device %zu failed (%d): %s", r, code,
                   testing::slurp(dir / ("device-" + std::to_string(r) + ".log")).c_str());
    }
  }
  if (worst != 0) {
    fs::remove_all(dir);
    return 3;
  }
  if (a.mode == "native") return report_native(a, sc, p, times, dir);
  auto med = medians(a, times, dir, {"forward_s", "backward_s", "dp_s", "total_s"});
  if (!med) return fail(3, med.error().what());
  const double fwd = (*med)["forward_s"], bwd = (*med)["backward_s"], dp = (*med)["dp_s"],
               total = (*med)["total_s"];
  const double s = sc.scale.s;
  std::printf(
      "%s, placement %s (%s): %d devices, %d stages x %d pipelines; s = %g, f = %g; "
      "activation %zu B, gradient %zu B; median of %d iterations after %d warm-up\n",
      sc.name.c_str(), p.method.c_str(), a.placement.c_str(), n, p.d_pp, p.d_dp, s, a.f,
      sc.pp_bytes(), sc.dp_bytes(), a.iterations, a.warmup);
  std::printf("%-10s %12s %12s %8s\n", "phase", "measured s", "predicted s", "ratio");
  const auto row = [](const char* name, double m, double pr) {
    std::printf("%-10s %12.4f %12.4f %8.3f\n", name, m, pr, pr > 0 ? m / pr : 0.0);
  };
  row("forward", fwd, s * p.pp_s);
  row("backward", bwd, s * p.pp_s);
  row("dp", dp, s * p.dp_s);
  row("total", total, s * p.total_s);
  std::printf("%s\n", nlohmann::json{{"scenario", sc.name},
                                     {"mode", "as_modelled"},
                                     {"placement", p.method},
                                     {"measured_s", total},
                                     {"predicted_s", s * p.total_s},
                                     {"forward_s", fwd},
                                     {"backward_s", bwd},
                                     {"dp_s", dp},
                                     {"predicted_pp_s", s * p.pp_s},
                                     {"predicted_dp_s", s * p.dp_s},
                                     {"payload_bytes", payload_bytes(sc, p)}}
                          .dump()
                          .c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a DT-FM placement executed on emulated links, against the cost model"};
  args a;
  app.add_option("--scenario", a.scenario, "scaled scenario: world8, regional8")
      ->capture_default_str();
  app.add_option("--placement", a.placement, "placement file (paco_schedule --placement-out)");
  app.add_option("--iterations", a.iterations, "measured iterations (>= 1)")->capture_default_str();
  app.add_option("--warmup", a.warmup, "warm-up iterations (>= 0)")->capture_default_str();
  app.add_option("--scale-s", a.s, "emulated time / modelled time, in (0, 1]")
      ->capture_default_str();
  app.add_option("--scale-f", a.f, "emulated bytes / modelled bytes, in (0, 1]")
      ->capture_default_str();
  app.add_option("--burst", a.burst, "shaper burst in bytes (>= 1500)")->capture_default_str();
  app.add_option("--mode", a.mode,
                 "as_modelled (the cost model's traffic) or native (GPipe + ring)")
      ->check(CLI::IsMember({"as_modelled", "native"}))
      ->capture_default_str();
  app.add_option("--micro-batches", a.micro_batches, "native: M, micro-batches per GPipe step")
      ->capture_default_str();
  app.add_option("--compute-ms", a.compute_ms,
                 "native: forward sleep per micro-batch (backward twice as long)")
      ->capture_default_str();
  app.add_option("--hosts", a.hosts,
                 "every device's host, comma-separated (default: all on 127.0.0.1)");
  app.add_option("--wrap", a.wrap,
                 "a command each device process runs under, {r} its rank (e.g. \"ip netns exec "
                 "emu{r}\")");
  app.add_flag("--kernel-rates", a.kernel_rates,
               "the shapers add only latency: the kernel sets each link's rate (tc htb)");
  bool print_links = false;
  app.add_flag("--print-links", print_links,
               "print every link's emulated latency (s) and rate (bit/s), then exit");
  app.add_option("--rank", a.rank, "(device processes) this device");
  app.add_option("--data-peers", a.data_peers, "(device processes) every device's data host:port");
  app.add_option("--control-peers", a.control_peers, "(device processes) control host:port each");
  app.add_option("--out", a.out, "(device processes) rank 0's times file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (a.iterations < 1 || a.warmup < 0) return fail(2, "--iterations must be >= 1, --warmup >= 0");
  if (a.burst < 1500) return fail(2, "--burst must be >= 1500 bytes");
  if (a.micro_batches < 1 || a.compute_ms < 0)
    return fail(2, "--micro-batches must be >= 1 and --compute-ms >= 0");
  auto sc = place::make_scaled_scenario(a.scenario, {a.s, a.f});
  if (!sc) return fail(2, sc.error().what());
  if (print_links) {
    for (int i = 0; i < sc->size(); ++i)
      for (int j = 0; j < sc->size(); ++j)
        if (i != j)
          std::printf("%d %d %.9f %.0f\n", i, j, sc->link(i, j).latency_s,
                      8 * sc->link(i, j).rate_bytes_per_s);
    return 0;
  }
  if (a.placement.empty()) return fail(2, "--placement FILE is required");
  auto p = place::read_placement(a.placement, sc->size(), sc->load.d_pp, sc->load.d_dp);
  if (!p) return fail(2, p.error().what());
  if (p->scenario != a.scenario)
    return fail(2, "placement.scenario: the file is for '" + p->scenario + "', this run is '" +
                       a.scenario + "'");
  try {
    if (a.rank >= 0) return run_device(a, *sc, *p);
    return run_launcher(a, argv[0], *sc, *p);
  } catch (const std::exception& e) {
    return fail(3, e.what());
  }
}
