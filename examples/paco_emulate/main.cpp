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
#include <string>
#include <vector>

#include "paco/net/asio_tcp.hpp"
#include "paco/net/free_port.hpp"
#include "paco/place/placement_file.hpp"
#include "paco/place/replay.hpp"
#include "paco/place/scaled.hpp"
#include "paco/testing/processes.hpp"

namespace {

using namespace paco;
namespace fs = std::filesystem;

int fail(int code, const std::string& m) {
  std::fprintf(stderr, "paco_emulate: %s\n", m.c_str());
  return code;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> split(const std::string& csv) {
  std::vector<std::string> out;
  std::size_t b = 0;
  for (std::size_t e; (e = csv.find(',', b)) != std::string::npos; b = e + 1)
    out.push_back(csv.substr(b, e - b));
  out.push_back(csv.substr(b));
  return out;
}

struct args {
  std::string scenario = "world8", placement, out, mode = "as_modelled";
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
      sh.rate_bytes_per_s = l.rate_bytes_per_s;
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
  if (a.mode == "native") {
    const auto no = native_options_of(a, sc);
    for (int it = 0; it < a.warmup + a.iterations; ++it) {
      auto t = place::replay_native(**d, **c, p, no, it);
      if (!t) return fail(3, "device " + std::to_string(a.rank) + ": " + t.error().what());
      if (a.rank == 0)
        out << nlohmann::json{{"iteration", it},
                              {"warmup", it < a.warmup},
                              {"pipeline_s", t->pipeline_s},
                              {"dp_s", t->dp_s},
                              {"total_s", t->total_s()}}
                   .dump()
            << "\n"
            << std::flush;
    }
    (*d)->close();
    (*c)->close();
    return 0;
  }
  for (int it = 0; it < a.warmup + a.iterations; ++it) {
    auto t = place::replay_as_modelled(**d, **c, p, ro, it);
    if (!t) return fail(3, "device " + std::to_string(a.rank) + ": " + t.error().what());
    if (a.rank == 0)
      out << nlohmann::json{{"iteration", it},
                            {"warmup", it < a.warmup},
                            {"forward_s", t->forward_s},
                            {"backward_s", t->backward_s},
                            {"dp_s", t->dp_s},
                            {"total_s", t->total_s()},
                            {"forward_hops", t->forward_hops}}
                 .dump()
          << "\n"
          << std::flush;
  }
  (*d)->close();
  (*c)->close();
  return 0;
}

// The launcher's report of a native run (times: rank 0's records).
int report_native(const args& a, const place::scaled_scenario& sc, const place::placement& p,
                  const fs::path& times, const fs::path& dir) {
  std::vector<double> pipe, dp, total;
  std::ifstream in(times);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("warmup", true)) continue;
    pipe.push_back(j["pipeline_s"]);
    dp.push_back(j["dp_s"]);
    total.push_back(j["total_s"]);
  }
  fs::remove_all(dir);
  if (int(total.size()) != a.iterations) return fail(3, "rank 0 recorded too few iterations");
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
  row("pipeline", median(pipe), pred.pipeline_s, s * 2 * p.pp_s);
  row("dp", median(dp), pred.dp_s, s * p.dp_s);
  row("total", median(total), pred.total_s(), s * p.total_s);
  std::printf("%s\n", nlohmann::json{{"scenario", sc.name},
                                     {"mode", "native"},
                                     {"placement", p.method},
                                     {"measured_s", median(total)},
                                     {"predicted_s", pred.total_s()},
                                     {"dtfm_s", s * p.total_s},
                                     {"pipeline_s", median(pipe)},
                                     {"dp_s", median(dp)},
                                     {"predicted_pipeline_s", pred.pipeline_s},
                                     {"predicted_dp_s", pred.dp_s}}
                          .dump()
                          .c_str());
  return 0;
}

int run_launcher(const args& a, const char* self, const place::scaled_scenario& sc,
                 const place::placement& p) {
  const int n = sc.size();
  if (!std::getenv("PACO_TOKEN")) setenv("PACO_TOKEN", "paco-emulate", 1);
  std::string data, control;
  for (int r = 0; r < n; ++r) {
    data += (r ? "," : "") + std::string("127.0.0.1:") + std::to_string(net::free_loopback_port());
    control +=
        (r ? "," : "") + std::string("127.0.0.1:") + std::to_string(net::free_loopback_port());
  }
  const fs::path dir = fs::temp_directory_path() / ("paco_emulate_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path times = dir / "times.jsonl";
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    char sbuf[32], fbuf[32];
    std::snprintf(sbuf, sizeof sbuf, "%.17g", a.s);
    std::snprintf(fbuf, sizeof fbuf, "%.17g", a.f);
    const std::vector<std::string> args{self,
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
    kids.push_back(testing::spawn_logged(args, dir / ("device-" + std::to_string(r) + ".log")));
  }
  int worst = 0;
  for (std::size_t r = 0; r < kids.size(); ++r) {
    const int code = testing::exit_code(testing::wait_exit(kids[r], std::chrono::minutes(30)));
    if (code != 0 && worst == 0) {
      worst = code;
      std::fprintf(stderr, "paco_emulate: device %zu failed (%d): %s", r, code,
                   testing::slurp(dir / ("device-" + std::to_string(r) + ".log")).c_str());
      for (pid_t k : kids) kill(k, SIGTERM);
    }
  }
  if (worst != 0) return 3;
  if (a.mode == "native") return report_native(a, sc, p, times, dir);
  std::vector<double> fwd, bwd, dp, total;
  std::ifstream in(times);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("warmup", true)) continue;
    fwd.push_back(j["forward_s"]);
    bwd.push_back(j["backward_s"]);
    dp.push_back(j["dp_s"]);
    total.push_back(j["total_s"]);
  }
  fs::remove_all(dir);
  if (int(total.size()) != a.iterations) return fail(3, "rank 0 recorded too few iterations");
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
  row("forward", median(fwd), s * p.pp_s);
  row("backward", median(bwd), s * p.pp_s);
  row("dp", median(dp), s * p.dp_s);
  row("total", median(total), s * p.total_s);
  std::printf("%s\n", nlohmann::json{{"scenario", sc.name},
                                     {"mode", "as_modelled"},
                                     {"placement", p.method},
                                     {"measured_s", median(total)},
                                     {"predicted_s", s * p.total_s},
                                     {"forward_s", median(fwd)},
                                     {"backward_s", median(bwd)},
                                     {"dp_s", median(dp)},
                                     {"predicted_pp_s", s * p.pp_s},
                                     {"predicted_dp_s", s * p.dp_s}}
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
  app.add_option("--placement", a.placement, "placement file (paco_schedule --placement-out)")
      ->required();
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
