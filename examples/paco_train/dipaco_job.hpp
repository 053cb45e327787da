#pragma once
// paco_train's DiPaCo job (job.mode = "dipaco"): real processes over TCP.
//
//   launcher  prepares the run directory (a shared base model, the routing of every document),
//             starts one store process and one process per worker on this machine, shows a
//             progress line per path, restarts a crashed worker, and at the end evaluates every
//             path on the documents of dipaco.eval_split routed to it and prints the results
//             table.
//   store     owns every module of the grid; one TCP link per worker (a worker that restarts
//             reconnects on its link); checkpoints the modules after every round close.
//   worker    trains one path: pull (hash-checked), H inner steps, push Δ (encoded with
//             dipaco.compress, error-feedback residual kept here), wait; checkpoints its inner
//             optimizer state and residual after every round; on restart it resumes from them.
//             The store decodes encoded pushes with its own codec of each module.
//
// Across machines: the same binary with --role store / --role worker --worker N on each
// machine, the same config (launch.store_host = the store machine) and the same PACO_TOKEN;
// copy the run directory that `--role prepare` wrote to every machine (docs/03_distributed.md).
//
// A run is bound to its directory: `prepare` gives it a run id, kept in routing.json (which
// carries a checksum of its content); every worker checkpoint records the run id, its worker and
// its path, and is refused elsewhere. No role overwrites a run it did not start: a store or
// worker finding its checkpoint continues only with --resume and starts over only with --fresh.
//
// Exit codes of the store and worker roles (the launcher restarts only the restartable ones):
//   0  the run is complete for this process
//   2  bad input: configuration, files, checkpoints (restarting cannot help)
//   3  the link to the store or to a worker was lost (restartable)
//   4  the process's state could not be written (checkpoint or log, after retries): the run
//      cannot go on without losing work, and nothing may report it finished

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "config.hpp"
#include "device_worker.hpp"
#include "paco/core/hash.hpp"
#include "paco/io/io.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/nn/gpt_file.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/route/route.hpp"
#include "paco/store/store.hpp"
#include "paco/store/store_file.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/routing.hpp"
#include "paco/train/worker_file.hpp"
#include "paco/train/worker_loop.hpp"

extern char** environ;

namespace paco_train {

namespace fs = std::filesystem;
using namespace paco;
using json = nlohmann::json;

constexpr double ln2 = 0.6931471805599453;

// Exit codes of the roles (see the file comment).
constexpr int exit_bad_input = 2, exit_link_lost = 3, exit_write_failed = 4;
// Tries of a checkpoint or log write before it is fatal (pauses of 0.2, 0.4, 0.8 s between).
constexpr int write_tries = 4;

struct job_processes;  // (below: the processes that push to the store)

// ---- files of a run ----
struct run_dir {
  fs::path dir;
  fs::path base() const { return dir / "base.safetensors"; }
  fs::path routing() const { return dir / "routing.json"; }
  fs::path store() const { return dir / "store.safetensors"; }
  fs::path worker_state(int w) const {
    return dir / ("worker-" + std::to_string(w) + ".safetensors");
  }
  fs::path worker_log(int w) const { return dir / ("worker-" + std::to_string(w) + ".jsonl"); }
  // Process s's metrics log (worker_log of its worker when the paths are not cut into stages).
  fs::path process_log(const job_processes& jp, int s) const;
  fs::path log(const std::string& role) const { return dir / (role + ".log"); }
};

// ---- data: Brown documents, tokenized: the training split and the one the table scores ----
struct job_data {
  // val: the documents of dipaco.eval_split (validation unless the run reports on test).
  std::vector<std::vector<std::int32_t>> train, val;
};

inline result<job_data> load_job_data(const train_config& cfg) {
  auto c = load_data(cfg.data);
  if (!c) return c.error();
  io::byte_tokenizer tok;
  job_data j;
  for (auto& doc : c->subset(io::split::train).docs) j.train.push_back(tok.encode(doc.text));
  const auto eval = cfg.dipaco.eval_split == "test" ? io::split::test : io::split::validation;
  for (auto& doc : c->subset(eval).docs) j.val.push_back(tok.encode(doc.text));
  return j;
}

// The shard of `path`: the training documents routed to it (path < 0: every document).
inline io::token_stream stream_of(const job_data& j, const std::vector<int>& route, int path) {
  const train::routed_docs docs{.train = {j.train.begin(), j.train.end()}};
  std::vector<std::vector<int>> sets(j.train.size());
  for (std::size_t i = 0; i < j.train.size(); ++i)
    if (path < 0 || route[i] == path) sets[i] = {0};
  return train::shards_of(docs, sets, 1)[0];
}

inline std::vector<path::level_span> levels_of(const nn::gpt& m, const train_config& cfg) {
  return path::split_gpt_levels(m.layout(), cfg.model.layers, int(cfg.dipaco.grid.size()))
      .value_or_throw();
}

// 32 random hex digits (the launcher's PACO_TOKEN, a run's id).
inline std::string random_token() {
  std::random_device rd;
  char b[33];
  for (int i = 0; i < 32; ++i) b[i] = "0123456789abcdef"[rd() % 16];
  b[32] = 0;
  return b;
}

// The store's outer optimizer, one type for every choice of dipaco.outer.
using store_outer = outer::one_of<outer::nesterov, outer::co2>;

// dipaco.outer with its fields (checked by validate).
inline store_outer outer_of(const train_config& cfg) {
  const auto& d = cfg.dipaco;
  if (d.outer == "co2")
    return outer::co2{.lr = d.outer_lr,
                      .momentum = d.outer_momentum,
                      .gap_penalty = d.outer_gap_penalty,
                      .clip = outer::parse_co2_clip(d.outer_clip).value_or_throw(),
                      .clip_threshold = d.outer_clip_threshold};
  return outer::nesterov{.lr = d.outer_lr, .momentum = d.outer_momentum};
}

// sync.mode with its fields (checked by validate).
inline train::sync_choice sync_of(const train_config& cfg) {
  return train::parse_sync(cfg.sync.mode, train::streaming{.overlap = cfg.sync.overlap_steps,
                                                           .alpha = cfg.sync.alpha})
      .value_or_throw();
}

// The run's plan: the configured grid over the model's levels, workers_per_path workers per
// path. Worker ids of the job are 1 … workers; worker w is the plan's worker w − 1.
inline path::path_plan make_plan(const train_config& cfg) {
  nn::gpt model(cfg.model);
  return path::path_plan::make_runtime(cfg.dipaco.grid, levels_of(model, cfg),
                                       cfg.dipaco.workers_per_path)
      .value_or_throw();
}

// ---- the processes that push to the store ----
// One per worker; with dipaco.stages = K > 1 (local-loss DiPaCo) one per stage of each worker's
// path, every stage pushing its own modules' Δ. Process s (1 … count()) is stage (s − 1) % K of
// worker (s − 1) / K + 1, and the store's worker s (its link, port and pushes).
struct job_processes {
  int workers = 0, K = 1;
  int count() const noexcept { return workers * K; }
  bool staged() const noexcept { return K > 1; }
  int worker_of(int s) const noexcept { return (s - 1) / K + 1; }
  int stage_of(int s) const noexcept { return (s - 1) % K; }
  int id(int w, int k) const noexcept { return (w - 1) * K + k + 1; }
  // The name of its log files: worker-W, or worker-W-stage-K.
  std::string name(int s) const {
    const std::string w = "worker-" + std::to_string(worker_of(s));
    return staged() ? w + "-stage-" + std::to_string(stage_of(s)) : w;
  }
};
inline fs::path run_dir::process_log(const job_processes& jp, int s) const {
  return dir / (jp.name(s) + ".jsonl");
}
inline job_processes processes_of(const train_config& cfg, const path::path_plan& g) {
  return {g.workers(), std::max(1, cfg.dipaco.stages)};
}
// The cut of a path into dipaco.stages stages (checked by validate).
inline pipeline::path_stages stages_of(const train_config& cfg, const path::path_plan& g) {
  nn::gpt model(cfg.model);
  return pipeline::path_stages::make(model, g.level_spans(), std::max(1, cfg.dipaco.stages),
                                     cfg.dipaco.stage_split)
      .value_or_throw();
}
// The modules process s pushes: its worker's path's, or those of its stage's levels.
inline std::vector<int> process_modules(const train_config& cfg, const path::path_plan& g,
                                        const job_processes& jp, int s) {
  const auto& all = g.worker_modules(jp.worker_of(s) - 1);
  if (!jp.staged()) return all;
  std::vector<int> m;
  for (int l : stages_of(cfg, g).levels_of(jp.stage_of(s))) m.push_back(all[std::size_t(l)]);
  return m;
}

// The environment variable `name`, or `fallback` when it is unset or empty.
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

inline std::string token_from_env() {
  return env_or("PACO_TOKEN", "");
}

// The store and the workers authenticate every link with PACO_TOKEN: without it nothing can
// connect, so a process without one refuses to start.
inline status require_token(const char* role) {
  if (!token_from_env().empty()) return {};
  return {errc::invalid_argument,
          std::string(role) +
              ": PACO_TOKEN is not set (the launcher sets it for the processes "
              "it starts; set the same secret on every machine of a manual run)"};
}

// The configuration a checkpoint of this job depends on, as space-separated key=value items
// (recorded in every checkpoint's metadata and compared on resume; dipaco.rounds may change).
inline std::string config_fingerprint(const train_config& cfg) {
  std::string grid;
  for (std::size_t i = 0; i < cfg.dipaco.grid.size(); ++i)
    grid += (i ? "x" : "") + std::to_string(cfg.dipaco.grid[i]);
  const auto& m = cfg.model;
  const auto& d = cfg.dipaco;
  std::ostringstream o;
  o << "model.vocab=" << m.vocab << " model.ctx=" << m.ctx << " model.d=" << m.d
    << " model.layers=" << m.layers << " model.heads=" << m.heads << " dipaco.grid=" << grid
    << " dipaco.workers_per_path=" << d.workers_per_path << " dipaco.inner_steps=" << d.inner_steps
    << " dipaco.pretrain_steps=" << d.pretrain_steps << " dipaco.outer_lr=" << d.outer_lr
    << " dipaco.outer_momentum=" << d.outer_momentum << " dipaco.path_rescale=" << d.path_rescale
    << " dipaco.weight_by_shard=" << d.weight_by_shard << " dipaco.prefix=" << d.prefix
    << " dipaco.compress=" << d.compress << " train.batch=" << cfg.train.batch
    << " train.seed=" << cfg.train.seed;
  // The routing file holds a route per scored document: another split is another run.
  if (d.eval_split != "validation") o << " dipaco.eval_split=" << d.eval_split;
  // An overlapped rule's checkpoint holds a round trained and not landed, a blocking one's a
  // round already pushed: neither resumes under the other (blocking adds nothing, so checkpoints
  // written before the overlapped rules existed still resume).
  if (cfg.sync.mode != "blocking") o << " sync.mode=" << cfg.sync.mode;
  if (cfg.sync.mode == "streaming")
    o << " sync.overlap_steps=" << cfg.sync.overlap_steps << " sync.alpha=" << cfg.sync.alpha;
  // Likewise the outer optimizer: nesterov, the only one before dipaco.outer, adds nothing.
  if (d.outer != "nesterov")
    o << " dipaco.outer=" << d.outer << " dipaco.outer_gap_penalty=" << d.outer_gap_penalty
      << " dipaco.outer_clip=" << d.outer_clip
      << " dipaco.outer_clip_threshold=" << d.outer_clip_threshold;
  return o.str();
}

inline net::tcp_options link_options(const train_config& cfg, int worker, int port, int rank,
                                     const std::string& token) {
  net::tcp_options o;
  o.rank = rank;
  o.size = 2;
  o.coordinator = cfg.launch.store_host + ":" + std::to_string(port);
  o.listen_host = cfg.launch.store_host == "127.0.0.1" ? "127.0.0.1" : "0.0.0.0";
  o.token = token;
  o.epoch = std::uint64_t(worker);
  o.connect_timeout = std::chrono::milliseconds(rank == 0 ? 2000 : 60000);
  o.peer_timeout = std::chrono::milliseconds(long(cfg.launch.peer_timeout_s * 1000));
  o.heartbeat_interval =
      std::chrono::milliseconds(std::max(50L, long(cfg.launch.peer_timeout_s * 100)));
  o.shaper.rate_bytes_per_s = cfg.launch.link_mbps * 1e6 / 8;
  o.shaper.latency = std::chrono::microseconds(long(cfg.launch.link_latency_ms * 1000));
  if (cfg.launch.tls) {
    o.tls = {.enabled = true,
             .ca_file = cfg.launch.tls_ca,
             .cert_file = env_or("PACO_TLS_CERT", cfg.launch.tls_cert),
             .key_file = env_or("PACO_TLS_KEY", cfg.launch.tls_key),
             .peer_name = cfg.launch.tls_peer_name};
  }
  return o;
}

inline int port_of(const train_config& cfg, const json& routing, int worker) {
  if (routing.contains("ports")) return routing["ports"][std::size_t(worker - 1)].get<int>();
  return cfg.launch.base_port + worker;
}

// ---- routing.json: the routing of every document, the run's id, the store's ports ----
// The checksum of a routing file's content: hash64 of its JSON without the "checksum" key
// (nlohmann's objects dump with sorted keys, so the text is canonical).
inline std::string routing_checksum(json j) {
  j.erase("checksum");
  const std::string text = j.dump();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash64(text.data(), text.size()));
  return hex;
}

// Writes routing.json atomically with its checksum. Errors: io naming the file.
inline status write_routing(const run_dir& rd, json j) {
  j["checksum"] = routing_checksum(j);
  return io::write_file_atomic(rd.routing(), j.dump());
}

// Reads routing.json. Errors name the file: not_found; corrupt when it is not a routing file,
// fails its checksum (edited or damaged) or holds no run id (written by an older paco).
inline result<json> read_routing(const run_dir& rd) {
  std::ifstream in(rd.routing());
  if (!in)
    return error(errc::not_found, "no routing file '" + rd.routing().string() +
                                      "' (run the launcher or --role prepare first)");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("train_route") || !j.contains("val_route"))
    return error(errc::corrupt, "'" + rd.routing().string() + "' is not a routing file");
  if (!j.contains("checksum") || !j["checksum"].is_string() || !j.contains("run_id") ||
      !j["run_id"].is_string())
    return error(errc::corrupt, "'" + rd.routing().string() +
                                    "' has no checksum or run id (written by an older paco): "
                                    "start the run over with --fresh");
  if (j["checksum"].get<std::string>() != routing_checksum(j))
    return error(errc::corrupt, "'" + rd.routing().string() +
                                    "' fails its checksum: it was edited or damaged (the routing "
                                    "of a run cannot change under it; start over with --fresh)");
  return j;
}

// The identity worker w's checkpoint must record in the run of `routing`.
inline train::worker_identity identity_of(const json& routing, const path::path_plan& g, int w) {
  return {
      .run = routing["run_id"].get<std::string>(), .worker = w, .path = g.path_of_worker(w - 1)};
}

// The last round worker w's log records (−1: none). A line that does not parse (the tail of a
// write cut short) is skipped.
inline long logged_round(const run_dir& rd, int w) {
  std::ifstream in(rd.worker_log(w));
  std::string line;
  long last = -1;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("round") && j["round"].is_number())
      last = std::max(last, j["round"].get<long>());
  }
  return last;
}

// Worker w's checkpoint, verified against the run (config, run id, worker, path) and its log:
// nullopt when the worker has not completed a round yet (no checkpoint and no logged round).
// Errors name the file: unreadable, another configuration, run, worker or path; missing though
// the log records completed rounds (deleted); older than the rounds its log records.
inline result<std::optional<train::worker_checkpoint>> verified_worker_checkpoint(
    const train_config& cfg, const run_dir& rd, const json& routing, const path::path_plan& g,
    const nn::gpt& model, int w) {
  const long logged = logged_round(rd, w);
  if (!fs::exists(rd.worker_state(w))) {
    if (logged < 0) return std::optional<train::worker_checkpoint>{};
    return error(errc::not_found,
                 "worker " + std::to_string(w) + "'s checkpoint '" + rd.worker_state(w).string() +
                     "' is missing, but its log '" + rd.worker_log(w).string() +
                     "' records rounds up to " + std::to_string(logged) +
                     " (deleted?): restore it, or start the run over with --fresh");
  }
  auto ck = train::load_worker_file(rd.worker_state(w), model, config_fingerprint(cfg),
                                    identity_of(routing, g, w));
  if (!ck) return ck.error();
  if (ck->round < logged)
    return error(errc::mismatch, "worker checkpoint '" + rd.worker_state(w).string() +
                                     "' completed round " + std::to_string(ck->round) +
                                     " but its log records round " + std::to_string(logged) +
                                     ": it is older than the run (restored from a backup?)");
  return std::optional<train::worker_checkpoint>(std::move(*ck));
}

// ---- prepare: base model + routing ----
inline status prepare(const train_config& cfg, const run_dir& rd, const job_data& data,
                      const path::path_plan& g) {
  fs::create_directories(rd.dir);
  nn::gpt model(cfg.model);
  arena<host> a(model.layout());
  model.init(a, std::uint64_t(cfg.train.seed));
  const auto& tc = cfg.train;
  const int B = tc.batch, T = cfg.model.ctx;
  if (cfg.dipaco.pretrain_steps > 0) {
    auto all = stream_of(data, {}, -1);
    train::inner_loop<nn::gpt, optim::adamw> loop(model,
                                                  {.batch = B,
                                                   .ctx = T,
                                                   .grad_clip = tc.grad_clip,
                                                   .schedule = {.lr = tc.lr,
                                                                .min_lr = tc.lr,
                                                                .warmup = tc.warmup,
                                                                .total = cfg.dipaco.pretrain_steps},
                                                   .threads = tc.threads},
                                                  all, std::uint64_t(tc.seed) * 31 + 7);
    const optim::adamw opt{
        .lr = tc.lr, .beta1 = tc.beta1, .beta2 = tc.beta2, .weight_decay = tc.weight_decay};
    a.zero(plane::moment1);
    a.zero(plane::moment2);
    io::progress bar("base model", cfg.dipaco.pretrain_steps);
    loop.run(a, opt, cfg.dipaco.pretrain_steps, [&](long t, double l) {
      char txt[48];
      std::snprintf(txt, sizeof txt, "loss %.3f", l);
      bar.update(t, txt);
    });
  }
  // Router: k-means over the base model's prefix features, one cluster per path.
  const float* theta = a.get(plane::param).data();
  std::vector<std::span<const std::int32_t>> tr, va;
  for (auto& d : data.train) tr.push_back(d);
  for (auto& d : data.val) va.push_back(d);
  const int D = cfg.model.d, P = cfg.dipaco.prefix;
  auto ft = route::prefix_features(model, theta, tr, P),
       fv = route::prefix_features(model, theta, va, P);
  std::vector<int> train_route(data.train.size(), 0), val_route(data.val.size(), 0);
  if (g.paths() > 1) {
    auto km = route::kmeans_router::fit(ft, int(tr.size()), D,
                                        {.k = g.paths(), .seed = std::uint64_t(tc.seed)});
    if (!km) return km.error();
    for (std::size_t i = 0; i < tr.size(); ++i) train_route[i] = km->route(&ft[i * D]);
    for (std::size_t i = 0; i < va.size(); ++i) val_route[i] = km->route(&fv[i * D]);
  }
  std::vector<io::tensor_ref> t;
  for (auto& nt : model.tensors()) t.push_back({nt.name, nt.shape, theta + nt.offset});
  if (auto s = io::save_safetensors(
          rd.base(), t, {{"format", "paco-base-1"}, {"config", config_fingerprint(cfg)}});
      !s)
    return s;
  json r = {{"paths", g.paths()},
            {"train_route", train_route},
            {"val_route", val_route},
            {"run_id", random_token()}};
  return write_routing(rd, r);
}

// Loads the base model. Errors name the file: missing, truncated, corrupt (checksum), written
// for another configuration, or lacking a tensor.
inline status load_base(const train_config& cfg, const run_dir& rd, const nn::gpt& model,
                        arena<host>& a) {
  auto f = io::load_safetensors(rd.base());
  if (!f) return f.error();
  if (!f->metadata.count(io::checksum_key))
    return {errc::corrupt, "base model '" + rd.base().string() + "' carries no checksum"};
  if (auto s = io::check_config(rd.base(), f->metadata, config_fingerprint(cfg)); !s) return s;
  auto th = a.get(plane::param);
  for (auto& nt : model.tensors()) {
    auto it = f->tensors.find(nt.name);
    if (it == f->tensors.end() || it->second.shape != nt.shape)
      return {errc::mismatch,
              "base model '" + rd.base().string() + "' lacks or mis-shapes " + nt.name};
    std::copy(it->second.values.begin(), it->second.values.end(), th.data() + nt.offset);
  }
  return {};
}

// ---- the store's checkpoint (store/store_file.hpp: θ, outer state, round and layout of every
// module, the configuration fingerprint) ----
template <class OuterOpt>
status save_store(const train_config& cfg, const run_dir& rd, const path::path_plan& g,
                  const store::module_store<OuterOpt>& st) {
  return store::save_store_file(rd.store(), st, g, config_fingerprint(cfg));
}

// Errors name the file and the problem (store::load_store_file's).
template <class OuterOpt>
status load_store(const train_config& cfg, const run_dir& rd, const path::path_plan& g,
                  store::module_store<OuterOpt>& st) {
  return store::load_store_file(rd.store(), st, g, config_fingerprint(cfg));
}

// ---- export: every path (and the base model) as a self-describing model file ----
// One exported model: out/<stem>.safetensors (nn::save_gpt), and with hf also out/hf/<stem>/
// in Hugging Face's GPT-2 layout (nn::save_gpt_hf). Errors name the file.
inline status export_model(const fs::path& out, const std::string& stem, const nn::gpt& model,
                           const float* theta, const std::map<std::string, std::string>& meta,
                           bool hf) {
  const fs::path file = out / (stem + ".safetensors");
  if (auto s = nn::save_gpt(file, model, theta, meta); !s) return s;
  std::printf("paco_train: wrote %s\n", file.c_str());
  if (!hf) return {};
  if (auto s = nn::save_gpt_hf(out / "hf" / stem, model, theta, meta); !s) return s;
  std::printf("paco_train: wrote %s/ (Hugging Face GPT-2 layout)\n", (out / "hf" / stem).c_str());
  return {};
}

// Writes out/base.safetensors and out/path-E0-E1….safetensors (nn/gpt_file.hpp: GPT-2 tensor
// names, the model config in the metadata) from the run's store checkpoint, and with hf each also
// in Hugging Face's layout under out/hf/. Errors name the file.
inline status export_paths(const train_config& cfg, const run_dir& rd, const fs::path& out,
                           bool hf = false) {
  const auto g = make_plan(cfg);
  nn::gpt model(cfg.model);
  arena<host> base(model.layout());
  if (auto s = load_base(cfg, rd, model, base); !s) return s;
  store::module_store<store_outer> store(g.module_table(), outer_of(cfg));
  if (auto s = load_store(cfg, rd, g, store); !s) return s;
  fs::create_directories(out);
  const float* b = base.get(plane::param).data();
  if (auto s = export_model(out, "base", model, b,
                            {{"source", rd.base().string()}, {"path", "base"}}, hf);
      !s)
    return s;
  for (int p = 0; p < g.paths(); ++p) {
    std::vector<float> th(b, b + model.layout().total());
    long round = 0;
    g.assemble(p, th.data(),
               [&](int m, std::span<float> dst) { round = store.pull(m, dst).first; });
    const std::string name = g.path_name(p);
    std::string stem = "path";  // path (0,1) → path-0-1.safetensors
    for (int e : g.path_experts(p)) stem += "-" + std::to_string(e);
    if (auto s = export_model(out, stem, model, th.data(),
                              {{"source", rd.store().string()},
                               {"path", name},
                               {"grid", g.describe()},
                               {"round", std::to_string(round)}},
                              hf);
        !s)
      return s;
  }
  return {};
}

// ---- role: store ----
// The last round each worker completed by its verified checkpoint (verified_worker_checkpoint,
// each read once): completed[w − 1], −1 for a worker that has not completed one. Errors: the
// first failing worker's, naming its file.
inline result<std::vector<long>> completed_rounds(const train_config& cfg, const run_dir& rd,
                                                  const json& routing, const path::path_plan& g) {
  nn::gpt model(cfg.model);
  std::vector<long> completed(std::size_t(g.workers()), -1);
  for (int w = 1; w <= g.workers(); ++w) {
    auto ck = verified_worker_checkpoint(cfg, rd, routing, g, model, w);
    if (!ck) return ck.error();
    if (*ck) completed[std::size_t(w - 1)] = (*ck)->round;
  }
  return completed;
}

// Whether the store is behind the workers' checkpoints: a module whose round is at or below the
// last round a worker through it completed (completed_rounds). Errors: mismatch naming the
// store checkpoint, the module and the worker (a store checkpoint older than the workers':
// restored from a backup, or reset by a store started anew).
template <class OuterOpt>
status check_store_not_behind(const run_dir& rd, const path::path_plan& g,
                              const store::module_store<OuterOpt>& st,
                              const std::vector<long>& completed) {
  for (int w = 1; w <= g.workers(); ++w) {
    const long done = completed[std::size_t(w - 1)];
    for (int m : g.worker_modules(w - 1))
      if (st.round(m) <= done)
        return {errc::mismatch,
                "the store checkpoint '" + rd.store().string() + "' holds module " +
                    std::to_string(m) + " at round " + std::to_string(st.round(m)) +
                    " but worker " + std::to_string(w) + " completed round " +
                    std::to_string(done) +
                    ": the store's state is older than the workers' (restored from an older "
                    "copy, or reset by a store started without --resume); the rounds since are "
                    "lost: start over with --fresh"};
  }
  return {};
}

// resume: continue from the store checkpoint (without one: start from the base model, when no
// worker has completed a round). fresh: start from the base model, overwriting a checkpoint.
inline int run_store(const train_config& cfg, const run_dir& rd, bool resume, bool fresh) {
  if (auto s = require_token("store"); !s)
    return std::fprintf(stderr, "%s\n", s.error().what().c_str()), exit_bad_input;
  if (resume && fresh)
    return std::fprintf(stderr, "store: --resume and --fresh exclude each other\n"), exit_bad_input;
  const auto g = make_plan(cfg);
  nn::gpt model(cfg.model);
  auto routing = read_routing(rd);
  if (!routing)
    return std::fprintf(stderr, "store: %s\n", routing.error().what().c_str()), exit_bad_input;
  store::module_store<store_outer> store(
      g.module_table(), outer_of(cfg),
      {.weight_by_shard = cfg.dipaco.weight_by_shard,
       .rescale = *outer::parse_path_rescale(cfg.dipaco.path_rescale)});
  const bool have = fs::exists(rd.store());
  if (have && !resume && !fresh)
    return std::fprintf(stderr,
                        "store: the run directory '%s' holds a store checkpoint (%s): pass "
                        "--resume to continue that run, or --fresh to start the store over "
                        "from the base model\n",
                        rd.dir.c_str(), rd.store().c_str()),
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
    if (auto s = io::with_retries([&] { return save_store(cfg, rd, g, store); }, write_tries); !s)
      return std::fprintf(stderr, "store: %s\n", s.error().what().c_str()), exit_write_failed;
    std::printf("store: starting from the base model%s\n",
                resume ? " (no store checkpoint yet)" : "");
  }
  const std::string token = token_from_env();
  // The store's workers: every process that pushes (one per worker, or per stage of a worker).
  const auto jp = processes_of(cfg, g);
  std::map<int, std::vector<int>> mods;
  for (int s = 1; s <= jp.count(); ++s) mods[s] = process_modules(cfg, g, jp, s);
  // Decoders of the workers' encoded pushes, one per module (none for fp32 pushes).
  const auto comp = compression_of(cfg);
  std::shared_ptr<const std::vector<compress::module_codec>> codecs;
  if (comp.spec.kind != compress::codec_kind::identity) {
    auto c = store::make_codecs(comp, model, g.module_spans());
    if (!c) return std::fprintf(stderr, "store: %s\n", c.error().what().c_str()), 2;
    codecs = std::make_shared<const std::vector<compress::module_codec>>(std::move(*c));
  }
  // A round's close is checkpointed before any worker hears of it; a checkpoint that cannot be
  // written (after retries) stops the store: serving on would lose every round since.
  std::optional<error> write_failed;
  store::server<net::asio_tcp, store_outer>* serving = nullptr;
  store::server<net::asio_tcp, store_outer> server(
      std::map<int, store::worker_link<net::asio_tcp>>{}, store, mods,
      {.round_timeout = std::chrono::milliseconds(long(cfg.launch.round_timeout_s * 1000)),
       .on_close =
           [&](const store::round_summary& r) {
             if (write_failed) return;
             if (auto s =
                     io::with_retries([&] { return save_store(cfg, rd, g, store); }, write_tries);
                 !s) {
               write_failed = s.error();
               std::fprintf(stderr,
                            "store: checkpoint of module %d round %ld failed: %s; stopping (the "
                            "store cannot keep its state)\n",
                            r.module, r.round, s.error().what().c_str());
               serving->stop();
               return;
             }
             std::printf(
                 "store: module %d round %ld closed with %d/%d pushes after %.2f s%s, |Δ| "
                 "%.4g, hash %016llx\n",
                 r.module, r.round, r.arrived, r.expected, r.open_s,
                 r.by_deadline ? " (deadline)" : "", r.delta_norm, (unsigned long long)r.hash);
           },
       .codecs = codecs,
       .on_refuse =
           [](const std::string& why) { std::fprintf(stderr, "store: %s\n", why.c_str()); },
       .rounds = cfg.dipaco.rounds});
  serving = &server;
  server.expect_rejoins(true);
  // One accept loop per worker link (per process): a worker that restarts reconnects here.
  std::atomic<bool> done{false};
  std::vector<std::thread> acceptors;
  std::mutex keep_mu;
  std::vector<std::unique_ptr<net::asio_tcp>> keep;
  for (int w = 1; w <= jp.count(); ++w)
    acceptors.emplace_back([&, w] {
      const int port = port_of(cfg, *routing, w);
      while (!done) {
        auto t = net::asio_tcp::connect(link_options(cfg, w, port, 0, token));
        if (!t) continue;  // nobody came within the connect timeout: listen again
        net::asio_tcp* raw = t->get();
        {
          std::lock_guard lk(keep_mu);
          keep.push_back(std::move(*t));
        }
        server.attach(w, {raw, 1});
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
  std::printf("store: done; %zu rounds closed, %.1f MB received, %zu late pushes dropped\n",
              server.history().size(), server.bytes_received() / 1e6, server.late_refused());
  return 0;
}

// ---- role: worker ----
// The round loop drives either worker over the TCP store client.
static_assert(
    train::PathWorker<train::path_worker<nn::gpt, optim::adamw>, store::client<net::asio_tcp>>);
static_assert(train::PathWorker<device_worker_ref, store::client<net::asio_tcp>>);

// Whether the store's checkpoint in the run directory holds every module of path p at the run's
// last round (false when there is none or it cannot be read): the path's work is done, whether
// or not its worker saw the last close.
inline bool store_finished_path(const train_config& cfg, const run_dir& rd,
                                const path::path_plan& g, int p) {
  if (!fs::exists(rd.store())) return false;
  store::module_store<store_outer> st(g.module_table(), outer_of(cfg));
  if (!load_store(cfg, rd, g, st)) return false;
  for (int m : g.path_modules(p))
    if (st.round(m) < cfg.dipaco.rounds) return false;
  return true;
}

// resume: continue from this worker's checkpoint (without one: start, when its log records no
// completed round). fresh: delete its checkpoint and log and start over.
inline int run_worker(const train_config& cfg, const run_dir& rd, int w, bool resume, bool fresh) {
  if (auto s = require_token("worker"); !s)
    return std::fprintf(stderr, "%s\n", s.error().what().c_str()), exit_bad_input;
  if (resume && fresh)
    return std::fprintf(stderr, "worker: --resume and --fresh exclude each other\n"),
           exit_bad_input;
  const auto g = make_plan(cfg);
  if (w < 1 || w > g.workers())
    return std::fprintf(stderr, "worker: --worker must be in [1, %d]\n", g.workers()),
           exit_bad_input;
  const int p = g.path_of_worker(w - 1);
  auto data = load_job_data(cfg);
  if (!data)
    return std::fprintf(stderr, "worker: %s\n", data.error().what().c_str()), exit_bad_input;
  auto routing = read_routing(rd);
  if (!routing)
    return std::fprintf(stderr, "worker: %s\n", routing.error().what().c_str()), exit_bad_input;
  auto shard = stream_of(*data, (*routing)["train_route"].get<std::vector<int>>(), p);
  if (shard.ids.size() <= std::size_t(cfg.model.ctx) + 1)
    return std::fprintf(stderr, "worker %d: path %d has no training documents\n", w, p),
           exit_bad_input;
  nn::gpt model(cfg.model);
  const auto lv = g.path_spans(p);
  const auto& tc = cfg.train;
  const long total = long(cfg.dipaco.rounds) * cfg.dipaco.inner_steps;
  train::inner_config icfg{
      .batch = tc.batch,
      .ctx = cfg.model.ctx,
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
  icfg.start_step = start_step;
  optim::adamw opt{
      .lr = tc.lr, .beta1 = tc.beta1, .beta2 = tc.beta2, .weight_decay = tc.weight_decay};
  const std::uint64_t seed =
      std::uint64_t(tc.seed) * 1000 + std::uint64_t(w) * 7 + std::uint64_t(start_step);
  const auto comp = compression_of(cfg);
  // The path worker on the host (train::path_worker) or, with train.device = "cuda", on the
  // device (device_worker.hpp); the round loop below drives either.
  std::optional<train::path_worker<nn::gpt, optim::adamw>> host;
  std::unique_ptr<device_path_worker> dev;
  if (tc.device == "cuda") {
    auto d = make_device_path_worker(w, model, lv, g.path_modules(p), opt, icfg, shard, seed,
                                     tc.gemm, comp);
    if (!d)
      return std::fprintf(stderr, "worker %d: %s\n", w, d.error().what().c_str()), exit_bad_input;
    dev = std::move(*d);
    if (saved)
      if (auto s = dev->restore(saved->state); !s)
        return std::fprintf(stderr, "worker %d: %s\n", w, s.error().what().c_str()), exit_bad_input;
  } else {
    auto& worker = host.emplace(w, model, lv, g.path_modules(p), opt, icfg, shard, seed);
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
  const int port = port_of(cfg, *routing, w);
  auto link = net::asio_tcp::connect(link_options(cfg, w, port, 1, token_from_env()));
  if (!link && finished()) return 0;
  if (!link)
    return std::fprintf(stderr, "worker %d: %s\n", w, link.error().what().c_str()),
           link.error().code == errc::auth ? exit_bad_input : exit_link_lost;
  store::client<net::asio_tcp> client(
      std::map<int, store::worker_link<net::asio_tcp>>{{0, {link->get(), 0}}},
      store::store_layout{{0}}, w);
  // A link lost to a store that has since finished the path (its partners closed the last
  // rounds while this worker restarted) is the end of this worker's part, not a failure.
  if (auto s = client.hello(); !s) {
    std::fprintf(stderr, "worker %d: %s\n", w, s.error().what().c_str());
    return finished() ? 0 : exit_link_lost;
  }
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
                          : 0.0};
  // After each round: its checkpoint, then its log record, each retried, each fatal when it
  // cannot be written (the loop stops with the error; the process exits 4).
  bool write_failed = false;
  // Every push's time and bytes, for the log: how bursty the wire is (store/metered.hpp).
  store::metered metered(client);
  const auto on_round = [&](const train::worker_round& r) -> status {
    const std::size_t sent = bytes_before + client.bytes_sent();
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
                               {"pushes", pushes}});
          },
          write_tries);
    write_failed = !s;
    return s;
  };
  const auto on_refused = [&](const error& e) {
    ++late;
    std::fprintf(stderr, "worker %d: %s; continuing with the next round\n", w, e.what().c_str());
  };
  status st;
  if (dev) {
    device_worker_ref ref(*dev);
    st = train::run_worker(ref, metered, lo, on_round, on_refused);
  } else {
    st = train::run_worker(*host, metered, lo, on_round, on_refused);
  }
  if (!st) {
    std::fprintf(stderr, "worker %d: %s\n", w, st.error().what().c_str());
    if (write_failed) return exit_write_failed;
    // A store behind this worker's checkpoint stays behind however often it is restarted.
    const long at = dev ? dev->round() : host->round();
    const bool behind = saved && at <= saved->round;
    if (behind) return exit_bad_input;
    return finished() ? 0 : exit_link_lost;
  }
  client.bye();
  (*link)->close();
  return 0;
}

}  // namespace paco_train
