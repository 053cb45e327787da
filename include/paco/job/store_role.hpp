#pragma once
// The store role of a DiPaCo job: owns every module of the grid; one TCP link per worker
// process (a worker that restarts reconnects on its link); checkpoints the modules after every
// round close, before any worker hears of it. Decodes encoded pushes with its own codec of each
// module.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "paco/io/atomic_file.hpp"
#include "paco/io/progress.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/metrics.hpp"
#include "paco/job/run_files.hpp"
#include "paco/job/run_lock.hpp"
#include "paco/job/settings_file.hpp"
#include "paco/job/status_page.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/http_server.hpp"
#include "paco/store/store.hpp"

namespace paco::job {

// What a worker that starts from nothing asks the store (store::client::describe): the run's
// routing file as written (its checksum inside), the configuration fingerprint, the data it was
// routed on and every module's round now. Called on the serving thread.
template <nn::BlockModel Model, class OuterOpt>
std::string describe_run(const dipaco_job<Model>& cfg, const json& routing,
                         const path::path_plan& g, const store::module_store<OuterOpt>& st) {
  std::vector<long> rounds;
  for (int m = 0; m < g.modules(); ++m) rounds.push_back(st.round(m));
  return json{{"routing", routing},
              {"fingerprint", config_fingerprint(cfg)},
              {"data", data_description(cfg)},
              {"rounds", rounds}}
      .dump();
}

// resume: continue from the store checkpoint (without one: start from the base model, when no
// worker has completed a round). fresh: start from the base model, overwriting a checkpoint.
// Returns the role's exit code (job/dipaco_job.hpp).
template <nn::BlockModel Model>
int run_store(const dipaco_job<Model>& cfg, const run_dir& rd, bool resume, bool fresh) {
  if (auto s = require_token("store"); !s)
    return std::fprintf(stderr, "%s\n", s.error().what().c_str()), exit_bad_input;
  if (resume && fresh)
    return std::fprintf(stderr, "store: --resume and --fresh exclude each other\n"), exit_bad_input;
  const path::path_plan g = make_plan(cfg);
  const Model& model = cfg.model;
  auto routing = read_routing(rd);
  if (!routing)
    return std::fprintf(stderr, "store: %s\n", routing.error().what().c_str()), exit_bad_input;
  const std::string run_id = (*routing)["run_id"].get<std::string>();
  store::module_store<store_outer> store(
      g.module_table(), outer_of(cfg),
      {.weight_by_shard = cfg.dipaco.weight_by_shard,
       .rescale = *outer::parse_path_rescale(cfg.dipaco.path_rescale)});
  store.merge_late(cfg.sync.max_staleness);
  const bool have = fs::exists(rd.store());
  if (have && !resume && !fresh)
    return std::fprintf(stderr,
                        "store: the run directory '%s' holds a store checkpoint (%s): pass "
                        "--resume to continue that run, or --fresh to start the store over "
                        "from the base model\n",
                        rd.dir.c_str(), rd.store().c_str()),
           exit_bad_input;
  // One live store per run: a second one (a stray --resume beside the live run) would listen on
  // the ports the workers reconnect to. The lock goes with this process, however it ends.
  auto lock = run_lock::acquire(rd.dir, cfg.program, "store.lock", "store");
  if (!lock)
    return std::fprintf(stderr, "store: %s\n", lock.error().what().c_str()), exit_bad_input;
  // Its links' ports before any work: one held by another process is an error naming it, not a
  // store that waits for workers who cannot reach it.
  for (int s = 1; s <= processes_of(cfg, g).count(); ++s)
    if (auto st = net::port_available(cfg.launch.store_host, port_of(cfg, *routing, s)); !st)
      return std::fprintf(stderr,
                          "store: port %d (the link to %s; launch.base_port, or drawn by the "
                          "launcher into routing.json) cannot be listened on: %s\n",
                          port_of(cfg, *routing, s), processes_of(cfg, g).name(s).c_str(),
                          st.error().message.c_str()),
             exit_bad_input;
  const auto completed = completed_rounds(cfg, rd, *routing, g);
  if (!completed)
    return std::fprintf(stderr, "store: %s\n", completed.error().what().c_str()), exit_bad_input;
  if (resume && have) {
    if (auto s = load_store(cfg, rd, g, store); !s)
      return std::fprintf(stderr, "store: cannot resume: %s\n", s.error().what().c_str()),
             exit_bad_input;
    if (auto s = check_store_not_behind(rd, g, store, *completed); !s)
      return std::fprintf(stderr, "store: cannot resume: %s\n", s.error().what().c_str()),
             exit_bad_input;
    std::printf("store: resumed from %s at round %ld\n", rd.store().c_str(), store.round(0));
    // Killed after the last close (the workers may be gone already): nothing is left to serve.
    bool complete = true;
    for (int m = 0; m < g.modules(); ++m) complete &= store.round(m) >= cfg.dipaco.rounds;
    if (complete) {
      std::printf("store: every module is at round %d: the run is complete\n", cfg.dipaco.rounds);
      return 0;
    }
  } else {
    // Starting from the base model is right only if no worker completed a round: with --resume
    // nothing was checkpointed yet; --fresh alone would put the store behind its workers.
    for (int w = 1; w <= g.workers(); ++w)
      if (const long done = (*completed)[std::size_t(w - 1)]; done >= 0)
        return std::fprintf(stderr,
                            resume ? "store: cannot resume: the store checkpoint '%s' is missing "
                                     "while worker %d completed round %ld\n"
                                   : "store: --fresh would start '%s' over behind worker %d, "
                                     "which completed round %ld: start the whole run over "
                                     "with the launcher's --fresh\n",
                            rd.store().c_str(), w, done),
               exit_bad_input;
    arena<host> a(model.layout());
    if (auto s = load_base(cfg, rd, model, a); !s)
      return std::fprintf(stderr, "store: %s\n", s.error().what().c_str()), exit_bad_input;
    for (int m = 0; m < g.modules(); ++m) {
      const auto& sp = g.span_of(m);
      store.set(m, std::span<const float>(a.get(plane::param).data() + sp.offset, sp.size));
    }
    if (auto s =
            io::with_retries([&] { return save_store(cfg, rd, g, store, run_id); }, write_tries);
        !s)
      return std::fprintf(stderr, "store: %s\n", s.error().what().c_str()), exit_write_failed;
    std::printf("store: starting from the base model%s\n",
                resume ? " (no store checkpoint yet)" : "");
  }
  const std::string token = token_from_env();
  // The store's workers: every process that pushes (one per worker, or per stage of a worker).
  const job_processes jp = processes_of(cfg, g);
  std::map<int, std::vector<int>> mods;
  for (int s = 1; s <= jp.count(); ++s) mods[s] = process_modules(cfg, g, jp, s);
  // Decoders of the workers' encoded pushes, one per module (none for fp32 pushes).
  const auto comp = compression_of(cfg);
  std::shared_ptr<const std::vector<compress::module_codec>> codecs;
  if (comp.spec.kind != compress::codec_kind::identity) {
    auto c = store::make_codecs(comp, model, g.module_spans());
    if (!c) return std::fprintf(stderr, "store: %s\n", c.error().what().c_str()), exit_bad_input;
    codecs = std::make_shared<const std::vector<compress::module_codec>>(std::move(*c));
  }
  // With launch.metrics_port: Prometheus metrics at /metrics and the status page at /, kept up to
  // date from the server's callbacks (job/metrics.hpp, job/status_page.hpp).
  const bool watched = cfg.launch.metrics_port > 0;
  store_metrics metrics(cfg.dipaco.rounds);
  std::map<int, status_board::process> who;
  for (int s = 1; s <= jp.count(); ++s)
    who[s] = {g.path_of_worker(jp.worker_of(s) - 1), jp.name(s)};
  std::vector<long> at;
  for (int m = 0; m < g.modules(); ++m) at.push_back(store.round(m));
  status_board board(cfg.program + ": DiPaCo", g, who, cfg.dipaco.rounds, at, setting_values(cfg));
  std::unique_ptr<net::http_server> http;
  if (watched) {
    const http_listen where = http_listen_of(cfg.launch, token);
    auto h = net::http_server::start(
        where.host, cfg.launch.metrics_port,
        {{"/metrics",
          [&] {
            return net::http_reply{200, prometheus_content_type, metrics.text()};
          }},
         {"/",
          [&] {
            return net::http_reply{200, "text/html; charset=utf-8", board.page()};
          }}},
        {.token = where.token});
    if (!h)
      return std::fprintf(stderr, "store: launch.metrics_port: %s\n", h.error().what().c_str()),
             exit_bad_input;
    http = std::move(*h);
    const std::string seen_at = where.token.empty() ? where.host : cfg.launch.store_host;
    std::printf("store: metrics on http://%s:%d/metrics, status page on http://%s:%d/%s\n",
                seen_at.c_str(), http->port(), seen_at.c_str(), http->port(),
                where.token.empty() ? "" : " (Authorization: Bearer <the run's PACO_TOKEN>)");
  }
  // A round's close is checkpointed before any worker hears of it; a checkpoint that cannot be
  // written (after retries) stops the store: serving on would lose every round since.
  std::optional<error> write_failed;
  // Under mpirun or started by hand no launcher shows the run's progress: the store does, every
  // module's rounds closed with an ETA (io::progress).
  std::optional<io::progress> bar;
  if (!supervised_by_launcher())
    bar.emplace("module rounds", long(g.modules()) * cfg.dipaco.rounds);
  store::server<net::asio_tcp, store_outer>* serving = nullptr;
  store::server<net::asio_tcp, store_outer> server(
      std::map<int, store::worker_link<net::asio_tcp>>{}, store, mods,
      {.round_timeout = std::chrono::milliseconds(long(cfg.launch.round_timeout_s * 1000)),
       .on_close =
           [&](const store::round_summary& r) {
             if (write_failed) return;
             if (auto s = io::with_retries([&] { return save_store(cfg, rd, g, store, run_id); },
                                           write_tries);
                 !s) {
               write_failed = s.error();
               std::fprintf(stderr,
                            "store: checkpoint of module %d round %ld failed: %s; stopping (the "
                            "store cannot keep its state)\n",
                            r.module, r.round, s.error().what().c_str());
               serving->stop();
               return;
             }
             if (watched) metrics.on_close(r), board.on_close(r);
             std::printf(
                 "store: module %d round %ld closed with %d/%d pushes after %.2f s%s%s, |Δ| "
                 "%.4g, hash %016llx\n",
                 r.module, r.round, r.arrived, r.expected, r.open_s,
                 r.by_deadline ? " (deadline)"
                 : r.by_quorum ? " (quorum)"
                               : "",
                 r.late_merged > 0
                     ? (" (" + std::to_string(r.late_merged) + " merged late)").c_str()
                     : "",
                 r.delta_norm, (unsigned long long)r.hash);
             if (bar) {
               long closed = 0;
               for (int m = 0; m < g.modules(); ++m) closed += store.round(m);
               bar->update(closed);
             }
           },
       .codecs = codecs,
       .on_refuse =
           [](const std::string& why) { std::fprintf(stderr, "store: %s\n", why.c_str()); },
       .rounds = cfg.dipaco.rounds,
       .quorum = cfg.sync.quorum,
       .grace = cfg.sync.grace,
       .describe = [&] { return describe_run(cfg, *routing, g, store); },
       .on_traffic =
           [&](const store::traffic& t) {
             if (watched) metrics.on_traffic(t), board.on_traffic(t);
           },
       .on_report =
           [&](const store::worker_report& r) {
             // Wire values: a report of no round of this run is dropped (a loss that is not
             // finite is shown as such: a diverged worker).
             const bool sane = r.round >= 0 && r.round < cfg.dipaco.rounds &&
                               std::isfinite(r.tokens_per_s) && r.tokens_per_s >= 0;
             if (watched && sane) metrics.on_report(r), board.on_report(r);
           }});
  serving = &server;
  server.expect_rejoins(true);
  // One accept loop per worker link (per process): a worker that restarts reconnects here.
  std::atomic<bool> done{false};
  std::vector<std::thread> acceptors;
  for (int w = 1; w <= jp.count(); ++w)
    acceptors.emplace_back([&, w] {
      const int port = port_of(cfg, *routing, w);
      while (!done) {
        auto t = net::asio_tcp::connect(link_options(cfg, w, port, 0, token));
        if (!t) continue;  // nobody came within the connect timeout: listen again
        // The server owns the link, and releases it once a reconnect replaces it.
        net::asio_tcp* raw = t->get();
        server.attach(w, std::move(*t), 1);
        while (!done && raw->alive(1)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  std::printf("store: serving %d modules to %d workers%s; pushes %s\n", g.modules(), jp.count(),
              jp.staged() ? (" (" + std::to_string(g.workers()) + " workers x " +
                             std::to_string(jp.K) + " stages)")
                                .c_str()
                          : "",
              comp.name().c_str());
  server.serve();
  done = true;
  for (auto& t : acceptors) t.join();
  if (write_failed) return exit_write_failed;
  if (!server.complete())
    return std::fprintf(stderr,
                        "store: stopped before every module reached round %d (%zu rounds "
                        "closed)\n",
                        cfg.dipaco.rounds, server.history().size()),
           exit_link_lost;
  std::printf(
      "store: done; %zu rounds closed, %.1f MB received, %zu late pushes merged, %zu dropped\n",
      server.history().size(), server.bytes_received() / 1e6, server.late_merged(),
      server.late_refused());
  return 0;
}

}  // namespace paco::job
