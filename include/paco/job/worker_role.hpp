#pragma once
// The worker role of a DiPaCo job: trains one path. Pull (hash-checked), H inner steps, push Δ
// (encoded with dipaco.compress, error-feedback residual kept here), wait; checkpoints its inner
// optimizer state and residual after every round, and on restart resumes from them. The round
// loop is train::run_worker's, driving a host path worker or the job's device worker.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "paco/io/atomic_file.hpp"
#include "paco/io/json_read.hpp"
#include "paco/io/metrics.hpp"
#include "paco/io/progress.hpp"
#include "paco/job/data.hpp"
#include "paco/job/device_worker.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/metrics.hpp"
#include "paco/job/run_files.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/http_server.hpp"
#include "paco/optim/inner_choice.hpp"
#include "paco/store/metered.hpp"
#include "paco/store/store.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/worker_file.hpp"
#include "paco/train/worker_loop.hpp"

namespace paco::job {

// The round loop drives either worker over the TCP store client.
static_assert(train::PathWorker<device_path_worker>);

// Where the run stands, as the store describes it (describe_run): its routing file and the
// round of every module. Its routing is checked before anything uses it: a route for each of
// this worker's n_train training and n_val evaluation documents, each a path of the grid.
// Errors: the store's or the link's; corrupt when the answer is not a description or its routing
// is malformed; mismatch when the store runs another configuration or data (naming both), or
// routed another number of documents.
struct store_view {
  json routing;
  std::vector<long> rounds;
};
template <nn::BlockModel Model>
result<store_view> ask_store(const dipaco_job<Model>& cfg, store::client<net::asio_tcp>& client,
                             const path::path_plan& g, std::size_t n_train, std::size_t n_val) {
  auto d = client.describe();
  if (!d) return d.error();
  auto parsed = io::json_parse(*d, "the store's description of its run");
  if (!parsed) return parsed.error();
  json j = std::move(*parsed);
  const bool shaped = j.is_object() && j.contains("routing") && j["routing"].is_object() &&
                      j.contains("fingerprint") && j["fingerprint"].is_string() &&
                      j.contains("rounds") && j["rounds"].is_array() &&
                      int(j["rounds"].size()) == g.modules();
  if (!shaped)
    return error(errc::corrupt, "the store's description of its run is not one of this job's");
  if (const std::string theirs = j["fingerprint"].get<std::string>(),
      mine = config_fingerprint(cfg);
      theirs != mine)
    return error(errc::mismatch, "the store runs another configuration: the store's '" + theirs +
                                     "', this worker's '" + mine + "'");
  if (j.contains("data") && j["data"] != data_description(cfg))
    return error(errc::mismatch, "the store's run was routed on other data: the store's '" +
                                     j["data"].dump() + "', this worker's '" +
                                     data_description(cfg) + "'");
  const json& r = j["routing"];
  if (!r.contains("run_id") || !r["run_id"].is_string() || !r.contains("checksum") ||
      !r["checksum"].is_string())
    return error(errc::corrupt, "the store's routing has no run id or checksum");
  for (const auto& [key, n] :
       {std::pair<const char*, std::size_t>{"train_route", n_train}, {"val_route", n_val}}) {
    if (!r.contains(key) || !r[key].is_array())
      return error(errc::corrupt, std::string("the store's routing has no ") + key);
    if (r[key].size() != n)
      return error(errc::mismatch, std::string("the store's routing has ") + key + " for " +
                                       std::to_string(r[key].size()) +
                                       " documents, this worker's data " + std::to_string(n) +
                                       " (another corpus or split?)");
    for (const auto& e : r[key])
      if (!io::json_int<long>(e, key, 0, g.paths() - 1))
        return error(errc::corrupt,
                     std::string("the store's routing holds a path that is not one in ") + key);
  }
  store_view v{j["routing"], {}};
  for (auto& r : j["rounds"]) {
    auto round = io::json_int<long>(r, "round", 0);
    if (!round)
      return error(errc::corrupt, "the store's description holds a round that is not one");
    v.rounds.push_back(*round);
  }
  return v;
}

// How a worker reaches its store: launched by the job's launcher (the defaults), or as a rank of
// an engine's launch (job/ranks.hpp: from_store, a long wait while the store rank prepares).
struct worker_start {
  // Take the run's routing from the store before reading anything of the run here (written
  // into the run directory when it differs): the store's process prepared the run.
  bool from_store = false;
  // How long the first connection to the store may take.
  std::chrono::milliseconds connect_wait{60000};
  // The store's host (empty: launch.store_host).
  std::string store_host;
};

// One life of worker w (1 … workers) of the job: what a worker process does from its start to
// its exit code; run_worker below is the role. resume: continue from this worker's checkpoint
// (without one: start, when its log records no completed round). fresh: delete its checkpoint and
// log and start over. Returns the role's exit code (job/dipaco_job.hpp).
//
// A worker without a checkpoint joins the run where the store is: it asks the store for the
// run's description first and starts at the lowest round of its path's modules, with fresh inner
// optimizer state (zero moments, no residual) and its step count on the run's schedule (that
// round × H, so its learning rate is its partners'). A worker with --resume on a directory that
// holds nothing of the run (a new machine, or a wiped one) joins from nothing: with
// launch.base_port set it reaches the store on base_port + w, and writes the store's routing.json
// (checksummed) into its directory before it starts.
template <nn::BlockModel Model>
int run_worker_life(const dipaco_job<Model>& cfg, const run_dir& rd, int w, bool resume, bool fresh,
                    const worker_start& how) {
  // The round loop drives the host worker over the TCP store client.
  static_assert(train::PathWorker<train::path_worker<Model, optim::inner_choice>>);
  if (auto s = require_token("worker"); !s)
    return std::fprintf(stderr, "%s\n", s.error().what().c_str()), exit_bad_input;
  if (resume && fresh)
    return std::fprintf(stderr, "worker: --resume and --fresh exclude each other\n"),
           exit_bad_input;
  const path::path_plan g = make_plan(cfg);
  if (w < 1 || w > g.workers())
    return std::fprintf(stderr, "worker: --worker must be in [1, %d]\n", g.workers()),
           exit_bad_input;
  const int p = g.path_of_worker(w - 1);
  result<job_data> data = load_job_data(cfg);
  if (!data)
    return std::fprintf(stderr, "worker: %s\n", data.error().what().c_str()), exit_bad_input;
  // The link to the store, its client, and where the store says the run is (a worker without a
  // checkpoint asks before it builds its path worker).
  std::unique_ptr<net::asio_tcp> link;
  std::optional<store::client<net::asio_tcp>> client;
  std::optional<store_view> view;
  const auto open_link = [&](int port) -> status {
    auto o = link_options(cfg, w, port, 1, token_from_env());
    o.connect_timeout = how.connect_wait;
    if (!how.store_host.empty()) o.coordinator = how.store_host + ":" + std::to_string(port);
    auto l = net::asio_tcp::connect(o);
    if (!l) return l.error();
    link = std::move(*l);
    client.emplace(std::map<int, store::worker_link<net::asio_tcp>>{{0, {link.get(), 0}}},
                   store::store_layout{{0}}, w);
    return {};
  };
  const auto link_failed = [&](const error& e) {
    std::fprintf(stderr, "worker %d: %s\n", w, e.what().c_str());
    return e.code == errc::auth ? exit_bad_input : exit_link_lost;
  };
  // A store's answer that cannot become right by asking again is bad input; the rest is the link.
  const auto exit_of = [](const error& e) {
    const bool permanent = e.code == errc::mismatch || e.code == errc::corrupt ||
                           e.code == errc::unsupported || e.code == errc::too_large;
    return permanent ? exit_bad_input : exit_link_lost;
  };
  // Where the store says the run is, asked once per life (joining from nothing, starting without
  // a checkpoint, and the check that the store is this run's). Returns 0, or the exit code.
  const auto ask_view = [&]() -> int {
    if (view) return 0;
    auto v = ask_store(cfg, *client, g, data->train.size(), data->val.size());
    if (!v)
      return std::fprintf(stderr, "worker %d: %s\n", w, v.error().what().c_str()),
             exit_of(v.error());
    view = std::move(*v);
    return 0;
  };
  auto routing = read_routing(rd);
  const bool nothing_here = !routing && routing.error().code == errc::not_found &&
                            !fs::exists(rd.worker_state(w)) && logged_round(rd, w) < 0;
  if ((nothing_here && resume) || how.from_store) {
    if (cfg.launch.base_port == 0)
      return std::fprintf(stderr,
                          "worker %d: the run directory '%s' holds no routing.json, and a worker "
                          "joins from nothing only when the store listens on fixed ports "
                          "(launch.base_port > 0; it reaches the store on base_port + %d): set it, "
                          "or copy the run's routing.json here\n",
                          w, rd.dir.c_str(), w),
             exit_bad_input;
    if (auto s = open_link(cfg.launch.base_port + w); !s) return link_failed(s.error());
    if (const int code = ask_view(); code != 0) return code;
    const store_view* v = &*view;
    std::error_code ec;
    fs::create_directories(rd.dir, ec);
    const bool same = routing && *routing == v->routing;
    // A rank's directory holding this worker's state of another run (the store rank started the
    // run over): that state is the old run's, and goes with its routing.
    if (how.from_store && routing && (*routing)["run_id"] != v->routing["run_id"]) {
      fs::remove(rd.worker_state(w), ec);
      fs::remove(rd.worker_log(w), ec);
      std::printf("worker %d: the store runs a new run: this directory's state of run %s removed\n",
                  w, (*routing)["run_id"].get<std::string>().c_str());
    }
    if (!same) {
      if (auto s = io::write_file_atomic(rd.routing(), v->routing.dump()); !s)
        return std::fprintf(stderr, "worker %d: %s\n", w, s.error().what().c_str()),
               exit_write_failed;
      std::printf("worker %d: %s: the store's routing.json written to %s\n", w,
                  nothing_here ? "this directory held nothing of the run (a first start here)"
                               : "the run's routing from its store",
                  rd.dir.c_str());
    }
    routing = read_routing(rd);
  }
  if (!routing)
    return std::fprintf(stderr, "worker: %s%s\n", routing.error().what().c_str(),
                        nothing_here ? " (or pass --resume to join the run from its store)" : ""),
           exit_bad_input;
  auto shard = stream_of(*data, (*routing)["train_route"].get<std::vector<int>>(), p);
  if (shard.ids.size() <= std::size_t(cfg.model.shape().ctx) + 1)
    return std::fprintf(stderr, "worker %d: path %d has no training documents\n", w, p),
           exit_bad_input;
  const Model& model = cfg.model;
  const auto lv = g.path_spans(p);
  const auto& tc = cfg.train;
  const long total = long(cfg.dipaco.rounds) * cfg.dipaco.inner_steps;
  train::inner_config icfg{
      .batch = tc.batch,
      .ctx = cfg.model.shape().ctx,
      .steps = cfg.dipaco.inner_steps,
      .grad_clip = tc.grad_clip,
      .schedule = {.lr = tc.lr, .min_lr = tc.min_lr, .warmup = tc.warmup, .total = total},
      .threads = std::max(1, tc.threads / g.workers())};
  if (fresh) {
    std::error_code ec;
    fs::remove(rd.worker_state(w), ec);
    fs::remove(rd.worker_log(w), ec);
  }
  if (!resume && (fs::exists(rd.worker_state(w)) || logged_round(rd, w) >= 0))
    return std::fprintf(stderr,
                        "worker %d: the run directory '%s' holds this worker's state (%s): pass "
                        "--resume to continue it, or --fresh to start this worker over\n",
                        w, rd.dir.c_str(), rd.worker_state(w).c_str()),
           exit_bad_input;
  // Resume the inner optimizer state (moments, residual, step) if this worker ran before
  // (train/worker_file.hpp). A checkpoint that exists but cannot be read (truncated, corrupt,
  // another configuration, run, worker or path) or that is missing or older than the rounds its
  // log records is an error naming it, never a silent restart at step 0.
  long start_step = 0;
  std::optional<train::worker_checkpoint> saved;
  std::size_t bytes_before = 0;
  auto verified = verified_worker_checkpoint(cfg, rd, *routing, g, model, w);
  if (!verified)
    return std::fprintf(stderr, "worker %d: cannot resume: %s\n", w,
                        verified.error().what().c_str()),
           exit_bad_input;
  if (*verified) {
    auto& ck = **verified;
    // Killed after its last round was saved: it has nothing left to do (the store may be done).
    if (ck.round + 1 >= cfg.dipaco.rounds) {
      std::printf("worker %d: every round is done (checkpoint '%s')\n", w,
                  rd.worker_state(w).c_str());
      return 0;
    }
    start_step = ck.step;
    if (ck.metadata.count("bytes_sent")) bytes_before = std::stoull(ck.metadata.at("bytes_sent"));
    saved = std::move(ck);
  }
  // No checkpoint: start where the store is (above). A path whose modules all reached the last
  // round has nothing left to train.
  if (!saved) {
    // The store finished the run while this worker restarted: nothing to connect to or train.
    if (!link) {
      if (store_finished_path(cfg, rd, g, p)) {
        std::printf("worker %d: the store's checkpoint holds path %d at the last round %d: done\n",
                    w, p, cfg.dipaco.rounds);
        return 0;
      }
      if (auto s = open_link(port_of(cfg, *routing, w)); !s) {
        if (store_finished_path(cfg, rd, g, p)) return 0;  // it finished while we connected
        return link_failed(s.error());
      }
    }
    if (const int code = ask_view(); code != 0) return code;
    long at = cfg.dipaco.rounds;
    for (int m : g.path_modules(p)) at = std::min(at, view->rounds[std::size_t(m)]);
    if (at >= cfg.dipaco.rounds) {
      std::printf("worker %d: the store holds path %d at the last round %d: done\n", w, p,
                  cfg.dipaco.rounds);
      return 0;
    }
    start_step = at * cfg.dipaco.inner_steps;
    if (at > 0)
      std::printf("worker %d: joining at round %ld (step %ld) with fresh inner optimizer state\n",
                  w, at, start_step);
  }
  icfg.start_step = start_step;
  optim::adamw opt{
      .lr = tc.lr, .beta1 = tc.beta1, .beta2 = tc.beta2, .weight_decay = tc.weight_decay};
  auto inner = optim::inner_by_name(tc.optimizer, model, opt,
                                    {.lr = tc.muon_lr, .momentum = tc.muon_momentum});
  if (!inner)
    return std::fprintf(stderr, "worker %d: train.%s\n", w, inner.error().what().c_str()),
           exit_bad_input;
  const std::uint64_t seed =
      std::uint64_t(tc.seed) * 1000 + std::uint64_t(w) * 7 + std::uint64_t(start_step);
  const auto comp = compression_of(cfg);
  // The path worker on the host (train::path_worker) or, with train.device = "cuda", on the
  // device (the job's make_device_worker); the round loop below drives either.
  std::optional<train::path_worker<Model, optim::inner_choice>> host;
  std::unique_ptr<device_path_worker> dev;
  if (tc.device == "cuda") {
    if (!cfg.make_device_worker)
      return std::fprintf(stderr,
                          "worker %d: train.device = \"cuda\": this program has no device "
                          "worker for its model\n",
                          w),
             exit_bad_input;
    auto d = cfg.make_device_worker(w, model, lv, g.path_modules(p), opt, icfg, shard, seed, comp);
    if (!d)
      return std::fprintf(stderr, "worker %d: %s\n", w, d.error().what().c_str()), exit_bad_input;
    dev = std::move(*d);
    if (saved)
      if (auto s = dev->restore(saved->state); !s)
        return std::fprintf(stderr, "worker %d: %s\n", w, s.error().what().c_str()), exit_bad_input;
  } else {
    auto& worker = host.emplace(w, model, lv, g.path_modules(p), *inner, icfg, shard, seed);
    if (comp.spec.kind != compress::codec_kind::identity) {
      auto c = store::make_codecs(comp, model, lv);
      if (!c)
        return std::fprintf(stderr, "worker %d: %s\n", w, c.error().what().c_str()), exit_bad_input;
      if (auto s = worker.set_codecs(std::move(*c)); !s)
        return std::fprintf(stderr, "worker %d: %s\n", w, s.error().what().c_str()), exit_bad_input;
    }
    if (saved) train::restore_worker_state(*saved, worker);
  }
  auto inner_step = [&] { return dev ? dev->inner_step() : host->inner_step(); };
  // The worker's checkpoint after a completed round (a device worker's planes come down first).
  const auto who = identity_of(*routing, g, w);
  auto save = [&](long round, std::map<std::string, std::string> meta) -> status {
    if (host)
      return train::save_worker_file(rd.worker_state(w), model, *host, round,
                                     config_fingerprint(cfg), who, std::move(meta));
    arena<paco::host> a(model.layout());
    if (auto s = dev->download(a); !s) return s;
    return train::save_worker_state(rd.worker_state(w), model, a, dev->inner_step(), round,
                                    config_fingerprint(cfg), who, std::move(meta));
  };
  auto log = io::metrics_log::open(rd.worker_log(w), true);
  if (!log)
    return std::fprintf(stderr, "worker %d: %s\n", w, log.error().what().c_str()),
           exit_write_failed;
  // Restarted after the store closed the path's last round (killed between its last push and
  // its checkpoint): the store may be gone, and there is nothing left to train. Only a worker
  // that ran before can be in that state, so only it reads the store's checkpoint first; any
  // worker does when the store cannot be reached.
  auto finished = [&] {
    if (!store_finished_path(cfg, rd, g, p)) return false;
    std::printf("worker %d: the store's checkpoint holds path %d at the last round %d: done\n", w,
                p, cfg.dipaco.rounds);
    return true;
  };
  if (saved && finished()) return 0;
  if (!link)
    if (auto s = open_link(port_of(cfg, *routing, w)); !s) {
      if (finished()) return 0;
      return link_failed(s.error());
    }
  // With launch.metrics_port: this worker's metrics on that port + w (job/metrics.hpp).
  worker_metrics metrics(cfg.dipaco.rounds);
  std::unique_ptr<net::http_server> http;
  if (cfg.launch.metrics_port > 0) {
    const http_listen where = http_listen_of(cfg.launch, token_from_env());
    auto h = net::http_server::start(
        where.host, cfg.launch.metrics_port + w,
        {{"/metrics",
          [&] {
            return net::http_reply{200, prometheus_content_type, metrics.text()};
          }}},
        {.token = where.token});
    if (!h)
      return std::fprintf(stderr, "worker %d: launch.metrics_port: %s\n", w,
                          h.error().what().c_str()),
             exit_bad_input;
    http = std::move(*h);
  }
  // A link lost to a store that has since finished the path (its partners closed the last
  // rounds while this worker restarted) is the end of this worker's part, not a failure.
  if (auto s = client->hello(); !s) {
    std::fprintf(stderr, "worker %d: %s\n", w, s.error().what().c_str());
    return finished() ? 0 : exit_link_lost;
  }
  // The store is this run's: one of another run (another routing.json, configuration or data)
  // listening where this run's store should is refused before anything is pulled or pushed.
  if (const int code = ask_view(); code != 0) return code;
  if (view->routing["run_id"] != (*routing)["run_id"])
    return std::fprintf(stderr,
                        "worker %d: the store on port %d runs run %s, but this run directory's "
                        "routing.json is run %s (another run's store on this run's ports?)\n",
                        w, port_of(cfg, *routing, w), view->routing["run_id"].dump().c_str(),
                        (*routing)["run_id"].dump().c_str()),
           exit_bad_input;
  // The round loop (train/worker_loop.hpp): pull (retried while the path's modules sit at
  // different rounds), H inner steps, push (a refused late push is not fatal), wait; after each
  // round a checkpoint of the inner optimizer state and a metrics record. With an overlapped
  // sync.mode the push runs behind the next round's steps, and the checkpoint after round r
  // closed holds θ and θ_start of round r+1, trained and not yet landed (a resume lands them).
  // Under streaming a round is a cycle of H steps whose staggered per-level syncs closed round
  // r; its checkpoint has nothing in flight, and each level resumes on its own.
  // This worker's slowdown for experiments (launch.throttle; checked by validate) and its pushes
  // dropped because their round closed without them.
  const double throttle = [&] {
    const auto th = parse_throttle(cfg.launch.throttle, g.workers());
    return th && th->count(w) ? th->at(w) : 1.0;
  }();
  long late = 0;
  // The sync rule (checked by validate) and, for eager's own share, the workers of each module.
  std::vector<int> sharing;
  for (int m : g.path_modules(p)) sharing.push_back(g.paths_through(m) * g.workers_per_path());
  const train::worker_loop_options lo{
      .rounds = cfg.dipaco.rounds,
      .round_deadline = std::chrono::milliseconds(long(cfg.launch.round_timeout_s * 2000)),
      .pull_tries = int(cfg.launch.round_timeout_s * 20) + 50,  // ≈ 2 round timeouts
      .completed = saved ? saved->round : -1,
      .train_budget = std::chrono::milliseconds(long(cfg.sync.train_budget_s * 1000)),
      .throttle = throttle,
      .sync = sync_of(cfg),
      .sharing = sharing,
      .resumed_loss = saved && saved->metadata.count("pending_loss")
                          ? std::stod(saved->metadata.at("pending_loss"))
                          : 0.0,
      .mixed_rounds = cfg.sync.quorum > 0 || cfg.sync.max_staleness > 0,
      .pace_measured = cfg.sync.pace == "measured"};
  // After each round: its checkpoint, then its log record, each retried, each fatal when it
  // cannot be written (the loop stops with the error; the process exits 4).
  bool write_failed = false;
  // Every push's time and bytes, for the log: how bursty the wire is (store/metered.hpp).
  store::metered metered(*client);
  // Its progress, a line a round: in its log, or on the terminal of a worker started by hand.
  const auto t_loop = std::chrono::steady_clock::now();
  long rounds_here = 0;
  const auto on_round = [&](const train::worker_round& r) -> status {
    const std::size_t sent = bytes_before + client->bytes_sent();
    json pushes = json::array();
    for (const auto& q : metered.take())
      pushes.push_back(
          {std::round(q.start_s * 1e4) / 1e4, std::round(q.end_s * 1e4) / 1e4, q.bytes});
    status s = io::with_retries(
        [&] {
          return save(r.round, {{"bytes_sent", std::to_string(sent)},
                                {"pending_loss", std::to_string(r.pending_loss)}});
        },
        write_tries);
    if (s)
      s = io::with_retries(
          [&] {
            return log->write({{"worker", w},
                               {"path", p},
                               {"round", r.round},
                               {"loss", r.loss},
                               {"bpb", r.loss / ln2},
                               {"step", inner_step()},
                               {"bytes_sent", sent},
                               {"codec", comp.name()},
                               {"round_s", r.seconds},
                               {"sync_s", r.sync_s},
                               {"late", late},
                               {"merged", client->merged_late()},
                               {"pushes", pushes}});
          },
          write_tries);
    write_failed = !s;
    if (!s) return s;
    // The round's account: to the store (its status page and metrics; a report that does not
    // reach it is not this round's failure) and to this worker's metrics.
    const double tokens = double(tc.batch) * cfg.model.shape().ctx * cfg.dipaco.inner_steps;
    const double train_s = r.seconds - r.sync_s;
    (void)client->report(r.round, r.loss, train_s > 0 ? tokens / train_s : 0);
    metrics.on_round({.round = r.round,
                      .loss = r.loss,
                      .seconds = r.seconds,
                      .sync_s = r.sync_s,
                      .tokens = tokens,
                      .inner_step = inner_step(),
                      .bytes_sent = sent,
                      .late = late});
    ++rounds_here;
    const double per_round =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_loop).count() /
        double(rounds_here);
    const long merged = client->merged_late();
    std::printf(
        "worker %d: round %ld of %d %s: loss %.4f (%.3f bits/byte), %.0f tokens/s, sync %.2f s, "
        "%.2f MB sent%s; eta %s\n",
        w, r.round + 1, cfg.dipaco.rounds, r.pushed ? "pushed" : "trained (closed without it)",
        r.loss, r.loss / ln2, train_s > 0 ? tokens / train_s : 0.0, r.sync_s, double(sent) / 1e6,
        merged > 0 ? (", " + std::to_string(merged) + " pushes merged late").c_str() : "",
        io::hms(per_round * double(std::max(0L, long(cfg.dipaco.rounds) - 1 - r.round))).c_str());
    return s;
  };
  const auto on_refused = [&](const error& e) {
    ++late;
    std::fprintf(stderr, "worker %d: %s; continuing with the next round\n", w, e.what().c_str());
  };
  status st;
  if (dev) {
    st = train::run_worker(*dev, metered, lo, on_round, on_refused);
  } else {
    st = train::run_worker(*host, metered, lo, on_round, on_refused);
  }
  if (!st) {
    std::fprintf(stderr, "worker %d: %s\n", w, st.error().what().c_str());
    if (write_failed) return exit_write_failed;
    // A store behind this worker's checkpoint stays behind however often it is restarted.
    const long at = dev ? dev->buffers().round() : host->round();
    const bool behind = saved && at <= saved->round;
    if (behind) return exit_bad_input;
    return finished() ? 0 : exit_link_lost;
  }
  client->bye();
  link->close();
  return 0;
}

// Worker w of the job (run_worker_life's arguments). Spawned by the job's launcher
// (launch.mode = "local"), a worker that lost its link to the store exits 3 and the launcher
// restarts it. Without that launcher (a rank of an mpirun or srun launch, which stops every rank
// when one exits, or a process started by hand) it rejoins in this process instead:
// after a second it resumes from its checkpoint, as a restarted process would, and keeps trying
// while the store has been silent for less than store_silence(cfg) (a round logged in between
// starts the silence over). So a store stopped or restarted for less than that is survived.
template <nn::BlockModel Model>
int run_worker(const dipaco_job<Model>& cfg, const run_dir& rd, int w, bool resume, bool fresh,
               const worker_start& how = {}) {
  using clock = std::chrono::steady_clock;
  int code = run_worker_life(cfg, rd, w, resume, fresh, how);
  if (supervised_by_launcher()) return code;
  auto lost_since = clock::now();
  for (long logged = logged_round(rd, w); code == exit_link_lost;) {
    if (const long now_logged = logged_round(rd, w); now_logged > logged)
      logged = now_logged, lost_since = clock::now();
    const auto left = store_silence(cfg) - (clock::now() - lost_since);
    if (left <= std::chrono::seconds(1)) {
      std::fprintf(stderr,
                   "worker %d: the store has not answered for %.0f s (launch.peer_timeout_s, "
                   "launch.round_timeout_s): giving up (exit %d)\n",
                   w, store_silence(cfg).count(), code);
      return code;
    }
    std::fprintf(stderr,
                 "worker %d: lost its link to the store; rejoining from its checkpoint (for %.0f s "
                 "more)\n",
                 w, std::chrono::duration<double>(left).count());
    std::this_thread::sleep_for(std::chrono::seconds(1));
    worker_start again = how;
    again.connect_wait =
        std::min(how.connect_wait, std::chrono::duration_cast<std::chrono::milliseconds>(left));
    code = run_worker_life(cfg, rd, w, /*resume=*/true, /*fresh=*/false, again);
  }
  return code;
}

}  // namespace paco::job
