#pragma once
// The results of a finished DiPaCo run: every path scored on the documents of dipaco.eval_split
// routed to it (the one scorer, route/evaluate.hpp), their union, DiPaCo's frequent re-routing,
// the bytes each path sent against fp32 pushes and a data-parallel run, and the loss curves.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/arena.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/json_read.hpp"
#include "paco/io/progress.hpp"
#include "paco/io/table.hpp"
#include "paco/job/data.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/log_traffic.hpp"
#include "paco/job/run_files.hpp"
#include "paco/job/run_lock.hpp"
#include "paco/nn/gemm.hpp"
#include "paco/route/evaluate.hpp"
#include "paco/route/route.hpp"
#include "paco/store/store.hpp"

namespace paco::job {

// How the stages of a path train (dipaco.stages > 1), for the launcher's lines.
inline std::string pipeline_name(const settings& cfg) {
  const auto& p = cfg.pipeline;
  if (p.schedule == "local")
    return "local losses, head " + p.head + ", queue " + std::to_string(p.queue_depth) +
           ", activations " + p.activations;
  return p.schedule + ", M = " + std::to_string(p.micro_batches) + " micro-batches, activations " +
         p.activations;
}

// The last record of each process's JSONL log (job_processes: a worker, or a stage of one); none
// for a process whose last line does not parse (io::json_parse: nesting bounded) or is not a
// round's record (an object whose "round" is an integer ≥ 0, whose "late" is one when present).
inline std::map<int, json> latest_records(const run_dir& rd, const job_processes& jp) {
  std::map<int, json> out;
  for (int w = 1; w <= jp.count(); ++w) {
    std::ifstream in(rd.process_log(jp, w));
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    if (!last.empty()) {
      auto j = io::json_parse(last, "'" + rd.process_log(jp, w).string() + "'");
      const bool a_round = j && j->is_object() && j->contains("round") &&
                           io::json_int<long>(j->at("round"), "round", 0) &&
                           (!j->contains("late") || io::json_int<long>(j->at("late"), "late", 0)) &&
                           (!j->contains("sync_s") || j->at("sync_s").is_number());
      if (a_round) out[w] = std::move(*j);
    }
  }
  return out;
}

// Loss curves per path: their data (loss_curves.dat) and, with gnuplot installed, a PNG. With
// stages, each worker's last stage (the path's own loss). Returns the PNG's path, or why there
// is none: gnuplot missing or failing, or a file not written (a full disk), named.
inline std::string plot_curves(const run_dir& rd, const path::path_plan& g,
                               const job_processes& jp) {
  const fs::path data = rd.dir / "loss_curves.dat", png = rd.dir / "loss_curves.png",
                 script = rd.dir / "loss_curves.gp";
  std::ostringstream out;
  for (int w = 1; w <= g.workers(); ++w) {
    out << "# worker " << w << "\n";
    std::ifstream in(rd.process_log(jp, jp.id(w, jp.K - 1)));
    std::string line;
    while (std::getline(in, line)) {
      auto parsed = io::json_parse(line, "a log line");  // one that does not parse is skipped
      if (!parsed) continue;
      json& j = *parsed;
      if (j.contains("round") && j["bpb"].is_number()) out << j["step"] << " " << j["bpb"] << "\n";
    }
    out << "\n\n";
  }
  if (auto s = io::write_file_atomic(data, out.str()); !s)
    return "not written (" + s.error().what() + ")";
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    return "not drawn (gnuplot not installed; the data is in " + data.string() + ")";
  std::ostringstream gp;
  gp << "set terminal png size 900,560\nset output '" << png.string() << "'\n"
     << "set title 'DiPaCo " << g.paths() << " paths: training loss per path'\n"
     << "set xlabel 'inner step'\nset ylabel 'bits per byte'\nset grid\nplot ";
  for (int w = 1; w <= g.workers(); ++w)
    gp << (w > 1 ? ", " : "") << "'" << data.string() << "' index " << (w - 1)
       << " with linespoints title 'worker " << w << " path "
       << g.path_name(g.path_of_worker(w - 1)) << "'";
  gp << "\n";
  if (auto s = io::write_file_atomic(script, gp.str()); !s)
    return "not drawn (" + s.error().what() + ")";
  std::error_code ec;
  fs::remove(png, ec);
  const std::string cmd = "gnuplot '" + script.string() + "' 2>/dev/null";
  const bool ran = std::system(cmd.c_str()) == 0;
  // gnuplot exits 0 when it cannot write all of its image (a full disk): an empty or missing file.
  const auto size = fs::file_size(png, ec);
  if (ran && !ec && size > 0) return png.string();
  return "not written (gnuplot " + std::string(ran ? "wrote no image to " : "failed on ") +
         png.string() + "; a full disk?)";
}

// A progress line (io::progress) for a scoring pass whose size its first report tells:
// hook() is a route::scoring_progress that draws it, with the elapsed time and an ETA.
class progress_bar {
 public:
  explicit progress_bar(std::string label) : label_(std::move(label)) {}
  route::scoring_progress hook() {
    return [this](std::size_t done, std::size_t total) {
      if (total == 0 || (bar_ && done == last_)) return;  // (the end is reported twice)
      if (!bar_) bar_.emplace(label_, (long long)total);
      last_ = done;
      bar_->update((long long)done);
    };
  }

 private:
  std::string label_;
  std::optional<io::progress> bar_;
  std::size_t last_ = 0;
};

// How long a run's phases took before its evaluation (seconds): loading the data and preparing
// the run directory (the base model's pretraining, the routing), and the rounds.
struct run_phases {
  double prepare_s = 0, rounds_s = 0;
  bool timed = true;  // false: the table of a finished run rebuilt later (run_results)
};

// Prints the results table of a finished, whole run (check_run_whole) and what it sent; the
// loss curves go to loss_curves.png when gnuplot is installed. phases: the run's time before
// the evaluation, which the summary shows with the evaluation's. Returns
// 0, or exit_bad_input when the store checkpoint cannot be read or routing's val_route is not one
// path index in [0, paths) per validation document.
template <nn::BlockModel Model>
int print_results(const dipaco_job<Model>& cfg, const run_dir& rd, const path::path_plan& g,
                  const job_data& data, const json& routing, const run_phases& phases) {
  const char* P = cfg.program.c_str();
  const job_processes jp = processes_of(cfg, g);
  const std::string split = cfg.dipaco.eval_split;
  const std::string tag = split == "test" ? "test" : "val";
  // The scorer runs the job's threads, each on its own batches with a single-threaded GEMM
  // (OpenBLAS's default, every core per call, spun a 1 s evaluation past minutes on a runner
  // whose cores were busy).
  const int threads = std::max(1, cfg.train.threads);
  nn::gemm_threads(1);
  const Model& model = cfg.model;
  store::module_store<store_outer> store(g.module_table(), outer_of(cfg));
  if (auto s = load_store(cfg, rd, g, store); !s)
    return std::fprintf(stderr, "%s: %s\n", P, s.error().what().c_str()), exit_bad_input;
  auto val_route =
      io::json_ints(routing.at("val_route"), "routing.json val_route", 0, g.paths() - 1);
  if (!val_route || val_route->size() < data.val.size())
    return std::fprintf(stderr, "%s: %s\n", P,
                        val_route ? "routing.json's val_route does not route every validation "
                                    "document (another corpus or split?)"
                                  : val_route.error().what().c_str()),
           exit_bad_input;
  // The one scorer (route/evaluate.hpp): every figure below gives every token the same context.
  const auto rule = route::sliding_window::make(cfg.model.shape().ctx).value_or_throw();
  std::vector<typename Model::workspace> wss;
  for (int t = 0; t < threads; ++t)
    wss.push_back(model.make_workspace({cfg.train.batch, cfg.model.shape().ctx}));
  std::vector<arena<host>> thetas;  // every path's parameters after the final outer step
  std::vector<const float*> th;
  for (int p = 0; p < g.paths(); ++p) {
    auto& a = thetas.emplace_back(model.layout());
    for (int m : g.path_modules(p)) {
      const auto& sp = g.span_of(m);
      store.pull(m, std::span<float>(a.get(plane::param).data() + sp.offset, sp.size));
    }
  }
  for (auto& a : thetas) th.push_back(a.get(plane::param).data());
  std::vector<route::scored_span> spans;
  std::vector<int> routed;
  for (std::size_t i = 0; i < data.val.size(); ++i)
    if (data.val[i].size() > std::size_t(cfg.dipaco.prefix) + 1) {
      spans.push_back({data.val[i], std::size_t(cfg.dipaco.prefix), data.val[i].size()});
      routed.push_back((*val_route)[i]);
    }
  // Frequent re-routing (DiPaCo Table 3) needs every path's nats of every document: the routed
  // figures are summed from the same nats (each token scored once per path, not again).
  const std::size_t W = std::size_t(cfg.dipaco.reroute_every);
  const bool reroute = W > 0 && g.paths() > 1;
  std::vector<route::nll> per(g.paths());
  std::vector<int> docs(g.paths(), 0);
  for (int p : routed) ++docs[std::size_t(p)];
  route::nll total, rerouted;
  const auto t0 = std::chrono::steady_clock::now();
  if (reroute) {
    std::printf(
        "%s: scoring the %s documents with every path (%d paths, %d threads): routed, "
        "and re-routed every %zu bytes by likelihood...\n",
        P, split.c_str(), g.paths(), threads, W);
    progress_bar bar("evaluation + re-routing");
    const auto v = route::every_path_nats(model, th, route::from_first_target(spans), rule,
                                          std::span(wss), bar.hook());
    per = route::routed_nll_by_path(v, spans, routed);
    rerouted = route::likelihood_rerouted_nll(v, spans, W);
  } else {
    std::printf("%s: evaluating every path on its routed %s documents (%d threads)...\n", P,
                split.c_str(), threads);
    // One bar over every path's pass, in targets (tokens) scored.
    std::size_t targets = 0, before = 0;
    for (auto& sp : spans) targets += sp.end - sp.begin;
    progress_bar bar("evaluation");
    for (int p = 0; p < g.paths(); ++p) {
      std::vector<route::scored_span> mine;
      std::size_t own = 0;
      for (std::size_t j = 0; j < spans.size(); ++j)
        if (routed[j] == p) mine.push_back(spans[j]), own += spans[j].end - spans[j].begin;
      const auto hook = bar.hook();
      const auto of_path = [&](std::size_t done, std::size_t n) {
        const double share = n ? double(done) / double(n) : 1.0;
        hook(before + std::size_t(double(own) * share), targets);
      };
      for (auto& n :
           route::token_nats(model, th[std::size_t(p)], mine, rule, std::span(wss), of_path))
        per[std::size_t(p)] += route::sum_nats(n, 0, n.size());
      before += own;
    }
  }
  for (auto& n : per) total += n;
  const double eval_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: evaluated in %.0f s\n", P, eval_s);
  std::map<int, json> rec = latest_records(rd, jp);
  // What every process's log says it sent, over the rounds those bytes cover (a process that
  // joined from nothing counts from its join: job/log_traffic.hpp), and what fp32 pushes of the
  // same rounds would have sent (request header + 4 bytes per float).
  const auto comp = compression_of(cfg);
  double bytes = 0, fp32_bytes = 0;
  long covered = 0;
  std::vector<double> path_bytes(std::size_t(g.paths()), 0.0);
  for (int s = 1; s <= jp.count(); ++s) {
    const log_traffic t = traffic_of_log(rd.process_log(jp, s));
    bytes += t.bytes;
    path_bytes[std::size_t(g.path_of_worker(jp.worker_of(s) - 1))] += t.bytes;
    covered += t.rounds;
    for (int m : process_modules(cfg, g, jp, s))
      fp32_bytes += double(t.rounds) * double(store::wire::push_bytes(4 * g.span_of(m).size));
  }
  const std::size_t n_params = model.param_count();
  const long steps = long(cfg.dipaco.rounds) * cfg.dipaco.inner_steps;
  const double dp =
      double(steps) * 2.0 * (g.workers() - 1) / std::max(g.workers(), 1) * double(n_params) * 4.0;
  const std::string png = plot_curves(rd, g, jp);

  io::table table({"path", tag + " docs", tag + " bits/byte", "sent (" + comp.name() + ")"});
  // The same figures for files (results.json: the exported model card quotes them).
  json figures = {{"split", split},
                  {"scorer", rule.name()},
                  {"routing_prefix", cfg.dipaco.prefix},
                  {"paths", json::array()}};
  for (int p = 0; p < g.paths(); ++p) {
    const double b = path_bytes[std::size_t(p)];
    table.add({g.path_name(p), std::to_string(docs[p]), io::cell(per[p].bits_per_token(), 4),
               io::cell(b / 1e6, 3, " MB")});
    figures["paths"].push_back({{"path", g.path_name(p)},
                                {"docs", docs[p]},
                                {"bits_per_byte", per[p].bits_per_token()},
                                {"bytes_sent", b}});
  }
  figures["all_routed"] = {{"docs", spans.size()}, {"bits_per_byte", total.bits_per_token()}};
  if (rerouted.tokens)
    figures["rerouted"] = {{"every", W}, {"bits_per_byte", rerouted.bits_per_token()}};
  if (auto s = io::write_file_atomic(rd.dir / "results.json", figures.dump(2) + "\n"); !s)
    std::fprintf(stderr, "%s: %s (the table below is not kept)\n", P, s.error().what().c_str());
  // The documents scored: those longer than the routing prefix (the others have nothing to score).
  table.add({"all (routed)", std::to_string(spans.size()), io::cell(total.bits_per_token(), 4),
             io::cell(bytes / 1e6, 3, " MB")});
  if (rerouted.tokens)
    table.add({"re-routed/" + std::to_string(W), std::to_string(spans.size()),
               io::cell(rerouted.bits_per_token(), 4), ""});
  std::printf("\n");
  table.print(stdout);
  std::printf("(scorer %s; routed: each document by its first %d bytes, scored on the rest",
              rule.name().c_str(), cfg.dipaco.prefix);
  if (rerouted.tokens)
    std::printf(
        "; re-routed/%zu: the same bytes, each chunk of %zu scored by the path that best "
        "predicted the previous one",
        W, W);
  std::printf(")\n");
  std::printf(
      "\nper-path model %.2fM parameters, %d modules of %.2fM; %ld inner steps per worker\n",
      n_params / 1e6, g.modules(), g.level(0).size / 1e6, steps);
  if (phases.timed)
    std::printf(
        "wall time: data and run directory (base model, routing) %.0f s, rounds %.0f s, "
        "evaluation %.0f s; %.0f s in all\n",
        phases.prepare_s, phases.rounds_s, eval_s, phases.prepare_s + phases.rounds_s + eval_s);
  else
    std::printf("wall time: evaluation %.0f s (the table of a finished run, from its directory)\n",
                eval_s);
  std::printf(
      "codec %s%s: bytes sent per worker %.3f MB (payloads and request headers, as "
      "sent); fp32 pushes would send %.2f MB (%.2fx more)\n",
      comp.name().c_str(),
      comp.spec.kind == compress::codec_kind::identity ? ""
      : comp.spec.error_feedback                       ? " with error feedback"
                                                       : " without error feedback",
      bytes / g.workers() / 1e6, fp32_bytes / g.workers() / 1e6, fp32_bytes / std::max(bytes, 1.0));
  const long all_rounds = long(jp.count()) * cfg.dipaco.rounds;
  if (covered < all_rounds)
    std::printf(
        "(the logs here cover %ld of the %ld process-rounds: a process that joined from nothing "
        "on another machine logged there, one whose log was lost counts from its new start)\n",
        covered, all_rounds);
  std::printf("a data-parallel run of the same steps would send %.1f MB per worker (%.0fx more)\n",
              dp / 1e6, dp / std::max(bytes / g.workers(), 1.0));
  if (jp.staged()) {
    // Each stage's own loss in its last round, and what crossed between the stages.
    double act = 0;
    std::string stages;
    for (int k = 0; k < jp.K; ++k) {
      double sum = 0;
      int n = 0;
      for (auto& [s, j] : rec)
        if (jp.stage_of(s) == k && j["bpb"].is_number())
          sum += j["bpb"].template get<double>(), ++n;
      char b[64];
      std::snprintf(b, sizeof b, "%sstage %d %s", k ? ", " : "", k, n ? "" : "-");
      stages += b;
      if (n) {
        std::snprintf(b, sizeof b, "%.3f", sum / n);
        stages += b;
      }
    }
    for (auto& [s, j] : rec)
      if (j.contains("activation_bytes")) act += j["activation_bytes"].template get<double>();
    std::printf(
        "paths cut into %d stages (%s): training bits/byte of the last round %s (stages before "
        "the last: their auxiliary heads'); %.1f MB of activations between stages per worker\n",
        jp.K, pipeline_name(cfg).c_str(), stages.c_str(), act / g.workers() / 1e6);
  }
  std::printf("loss curves: %s; store checkpoint: %s\n", png.c_str(), rd.store().c_str());
  return 0;
}

// The results table of a finished run from its directory alone, whatever launched it (a
// manual-mode run's processes, mpirun, a launcher since gone): the run locked (a live launch is
// refused, naming its pid), checked whole (check_run_whole: every module at the last round), its
// data and routing read, then print_results (results.json and the loss curves rewritten from the
// same checkpoint). Returns print_results' code; exit_bad_input naming what is missing when the
// run is not whole or not there.
template <nn::BlockModel Model>
int run_results(const dipaco_job<Model>& cfg, const run_dir& rd) {
  const char* P = cfg.program.c_str();
  auto fail = [&](const std::string& m) {
    std::fprintf(stderr, "%s: results of '%s': %s\n", P, rd.dir.c_str(), m.c_str());
    return exit_bad_input;
  };
  if (!fs::exists(rd.store())) return fail("no store checkpoint (" + rd.store().string() + ")");
  auto lock = run_lock::acquire(rd.dir, cfg.program);
  if (!lock) return fail(lock.error().what());
  const path::path_plan g = make_plan(cfg);
  if (auto s = check_run_whole(cfg, rd, g); !s)
    return fail("the run is not whole: " + s.error().what());
  auto data = load_job_data(cfg);
  if (!data) return fail(data.error().what());
  auto routing = read_routing(rd);
  if (!routing) return fail(routing.error().what());
  return print_results(cfg, rd, g, *data, *routing, {.timed = false});
}

}  // namespace paco::job
