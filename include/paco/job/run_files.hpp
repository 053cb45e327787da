#pragma once
// The files of a DiPaCo job's run directory and their checks. A run is bound to its directory:
// `prepare` gives it a run id, kept in routing.json (which carries a checksum of its content);
// every worker checkpoint records the run id, its worker and its path, and is refused elsewhere.
//   run_dir                    the files' names
//   read_routing / write_routing   routing.json: every document's path, the run id, the ports
//   verified_worker_checkpoint a worker's checkpoint checked against the run and its log
//   load_base, load_store, save_store   the base model and the store's checkpoint
//   completed_rounds, check_store_not_behind, store_finished_path   how far the run got
//   previous_run_files, verify_resume, check_run_whole   the launcher's checks of a directory

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/hash.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/checkpoint.hpp"
#include "paco/io/json_read.hpp"
#include "paco/io/safetensors.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/pipeline/stage_file.hpp"
#include "paco/store/store.hpp"
#include "paco/store/store_file.hpp"
#include "paco/train/worker_file.hpp"

namespace paco::job {

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
  fs::path process_log(const job_processes& jp, int s) const {
    return dir / (jp.name(s) + ".jsonl");
  }
  fs::path log(const std::string& role) const { return dir / (role + ".log"); }
  // The program's configuration as the run was started with it (dipaco_job::config_record).
  fs::path config_record() const { return dir / "job_config.json"; }
  // The checkpoints of worker w's stages (dipaco.stages > 1) are a group of stage files
  // (pipeline/stage_file.hpp): "worker-3.stage-1.step-40.safetensors".
  static std::string stage_group(int w) { return "worker-" + std::to_string(w); }
  fs::path stage_state(int w, int k, long step) const {
    return dir / pipeline::stage_file_name(k, step, stage_group(w));
  }
};
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

// Reads routing.json. Errors name the file: not_found; too_large when it nests deeper than
// io::json_max_depth levels; corrupt when it is not a routing file, fails its checksum (edited
// or damaged), holds no run id (written by an older paco), or holds an integer out of its range
// (checked before narrowing: paths ≥ 1, every route in [0, paths), every port in [1, 65535]),
// so that its readers may take them as ints.
inline result<json> read_routing(const run_dir& rd) {
  std::ifstream in(rd.routing());
  if (!in)
    return error(errc::not_found, "no routing file '" + rd.routing().string() +
                                      "' (run the launcher or --role prepare first)");
  auto parsed = io::json_parse(in, "'" + rd.routing().string() + "'");
  if (!parsed && parsed.error().code != make_error_code(errc::corrupt)) return parsed.error();
  if (!parsed || !parsed->is_object() || !parsed->contains("train_route") ||
      !parsed->contains("val_route"))
    return error(errc::corrupt, "'" + rd.routing().string() + "' is not a routing file");
  json j = std::move(*parsed);
  if (!j.contains("checksum") || !j["checksum"].is_string() || !j.contains("run_id") ||
      !j["run_id"].is_string())
    return error(errc::corrupt, "'" + rd.routing().string() +
                                    "' has no checksum or run id (written by an older paco): "
                                    "start the run over with --fresh");
  if (j["checksum"].get<std::string>() != routing_checksum(j))
    return error(errc::corrupt, "'" + rd.routing().string() +
                                    "' fails its checksum: it was edited or damaged (the routing "
                                    "of a run cannot change under it; start over with --fresh)");
  const auto bad = [&](const error& e) {
    return error(errc::corrupt, "'" + rd.routing().string() + "': " + e.message);
  };
  int paths = std::numeric_limits<int>::max();
  if (j.contains("paths")) {
    auto n = io::json_int(j["paths"], "paths", 1, std::numeric_limits<int>::max());
    if (!n) return bad(n.error());
    paths = *n;
  }
  for (const char* key : {"train_route", "val_route"})
    if (auto r = io::json_ints(j[key], key, 0, paths - 1); !r) return bad(r.error());
  if (j.contains("ports"))
    if (auto p = io::json_ints(j["ports"], "ports", 1, 65535); !p) return bad(p.error());
  return j;
}

// The identity worker w's checkpoint must record in the run of `routing`.
inline train::worker_identity identity_of(const json& routing, const path::path_plan& g, int w) {
  return {
      .run = routing["run_id"].get<std::string>(), .worker = w, .path = g.path_of_worker(w - 1)};
}

// The last round worker w's log records (−1: none). A line that does not parse (the tail of a
// write cut short, or nested deeper than io::json_max_depth) or whose round is not an integer
// ≥ 0 (checked before narrowing: 8.9 is not round 8) is skipped.
inline long logged_round(const run_dir& rd, int w) {
  std::ifstream in(rd.worker_log(w));
  const std::string origin = "'" + rd.worker_log(w).string() + "'";
  std::string line;
  long last = -1;
  while (std::getline(in, line)) {
    const auto j = io::json_parse(line, origin);
    if (!j || !j->is_object() || !j->contains("round")) continue;
    if (const auto r = io::json_int<long>((*j)["round"], "round", 0); r) last = std::max(last, *r);
  }
  return last;
}

// Worker w's checkpoint, verified against the run (config, run id, worker, path) and its log:
// nullopt when the worker has not completed a round yet (no checkpoint and no logged round).
// Errors name the file: unreadable, another configuration, run, worker or path; missing though
// the log records completed rounds (deleted); older than the rounds its log records.
template <nn::BlockModel Model>
result<std::optional<train::worker_checkpoint>> verified_worker_checkpoint(
    const dipaco_job<Model>& cfg, const run_dir& rd, const json& routing, const path::path_plan& g,
    const Model& model, int w) {
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

// Loads the base model. Errors name the file: missing, truncated, corrupt (checksum), written
// for another configuration, or lacking a tensor.
template <nn::BlockModel Model>
status load_base(const dipaco_job<Model>& cfg, const run_dir& rd, const Model& model,
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
// module, the configuration fingerprint, the run's id) ----
// run_id: routing.json's, which binds the checkpoint to its run as the workers' are bound.
template <nn::BlockModel Model, class OuterOpt>
status save_store(const dipaco_job<Model>& cfg, const run_dir& rd, const path::path_plan& g,
                  const store::module_store<OuterOpt>& st, const std::string& run_id) {
  // The whole model and data configuration beside the compared fingerprint (which keeps to what
  // older checkpoints recorded, so that they still resume).
  return store::save_store_file(
      rd.store(), st, g, config_fingerprint(cfg),
      {{"model", cfg.model_config.empty() ? describe_model(cfg.model) : cfg.model_config},
       {"data", data_description(cfg)},
       {"run_id", run_id}});
}

// Errors name the file and the problem (store::load_store_file's), among them a checkpoint of
// another run (its run id is not routing.json's: a store.safetensors of another run of the same
// configuration, copied in). A checkpoint written before checkpoints recorded their run is taken.
template <nn::BlockModel Model, class OuterOpt>
status load_store(const dipaco_job<Model>& cfg, const run_dir& rd, const path::path_plan& g,
                  store::module_store<OuterOpt>& st) {
  auto routing = read_routing(rd);
  if (!routing) return routing.error();
  return store::load_store_file(rd.store(), st, g, config_fingerprint(cfg),
                                {{"run_id", (*routing)["run_id"].get<std::string>()}});
}
// The last round each worker completed by its verified checkpoint (verified_worker_checkpoint,
// each read once): completed[w − 1], −1 for a worker that has not completed one. Errors: the
// first failing worker's, naming its file.
template <nn::BlockModel Model>
result<std::vector<long>> completed_rounds(const dipaco_job<Model>& cfg, const run_dir& rd,
                                           const json& routing, const path::path_plan& g) {
  const Model& model = cfg.model;
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

// Whether the store's checkpoint in the run directory holds every module of path p at the run's
// last round (false when there is none or it cannot be read): the path's work is done, whether
// or not its worker saw the last close.
template <nn::BlockModel Model>
bool store_finished_path(const dipaco_job<Model>& cfg, const run_dir& rd, const path::path_plan& g,
                         int p) {
  if (!fs::exists(rd.store())) return false;
  store::module_store<store_outer> st(g.module_table(), outer_of(cfg));
  if (!load_store(cfg, rd, g, st)) return false;
  for (int m : g.path_modules(p))
    if (st.round(m) < cfg.dipaco.rounds) return false;
  return true;
}

// Every stage checkpoint of the run's stages in the directory (none when paths are not cut).
inline std::vector<fs::path> stage_states(const run_dir& rd, const job_processes& jp) {
  std::vector<fs::path> out;
  for (int w = 1; w <= jp.workers && jp.staged(); ++w)
    for (int k = 0; k < jp.K; ++k)
      for (long t : pipeline::stage_file_steps(rd.dir, k, run_dir::stage_group(w)))
        out.push_back(rd.stage_state(w, k, t));
  return out;
}

// Which files of a previous run the directory holds (empty: none).
inline std::vector<fs::path> previous_run_files(const run_dir& rd, const job_processes& jp) {
  std::vector<fs::path> out = stage_states(rd, jp);
  for (auto& f : {rd.routing(), rd.base(), rd.store()})
    if (fs::exists(f)) out.push_back(f);
  for (int w = 1; w <= jp.workers; ++w)
    for (auto& f : {rd.worker_state(w), rd.worker_log(w)})
      if (fs::exists(f)) out.push_back(f);
  for (int s = 1; s <= jp.count(); ++s)
    if (fs::exists(rd.process_log(jp, s)) && rd.process_log(jp, s) != rd.worker_log(s))
      out.push_back(rd.process_log(jp, s));
  return out;
}

// --resume: every checkpoint a resumed run would read is verified (present where it must be,
// complete, checksum, configuration, run id, worker and path; routing.json's checksum), and the
// store must not be behind the workers. Returns whether a store checkpoint exists (without one
// and without any worker checkpoint the store starts from the base model: nothing was trained).
template <nn::BlockModel Model>
result<bool> verify_resume(const dipaco_job<Model>& cfg, const run_dir& rd,
                           const path::path_plan& g) {
  for (auto& f : {rd.routing(), rd.base()})
    if (!fs::exists(f))
      return error(errc::not_found, "--resume: '" + f.string() +
                                        "' is missing (nothing to resume: run with --fresh)");
  auto routing = read_routing(rd);
  if (!routing) return error(routing.error().code, "--resume: " + routing.error().message);
  const Model& model = cfg.model;
  arena<host> a(model.layout());
  if (auto s = load_base(cfg, rd, model, a); !s)
    return error(s.error().code, "--resume: " + s.error().message);
  const auto completed = completed_rounds(cfg, rd, *routing, g);
  if (!completed) return error(completed.error().code, "--resume: " + completed.error().message);
  const bool any_worker =
      std::any_of(completed->begin(), completed->end(), [](long r) { return r >= 0; });
  if (!fs::exists(rd.store())) {
    if (any_worker)
      return error(errc::not_found, "--resume: the store checkpoint '" + rd.store().string() +
                                        "' is missing while workers have checkpoints");
    return false;
  }
  store::module_store<store_outer> store(g.module_table(), outer_of(cfg));
  if (auto s = load_store(cfg, rd, g, store); !s)
    return error(s.error().code, "--resume: " + s.error().message);
  if (auto s = check_store_not_behind(rd, g, store, *completed); !s)
    return error(s.error().code, "--resume: " + s.error().message);
  return true;
}

// Whether a finished run is whole: every module of the store's checkpoint at the last round
// (every process also exited 0: none failed a checkpoint or log write). Errors name the module.
template <nn::BlockModel Model>
status check_run_whole(const dipaco_job<Model>& cfg, const run_dir& rd, const path::path_plan& g) {
  store::module_store<store_outer> store(g.module_table(), outer_of(cfg));
  if (auto s = load_store(cfg, rd, g, store); !s) return s;
  for (int m = 0; m < g.modules(); ++m)
    if (store.round(m) != cfg.dipaco.rounds)
      return {errc::mismatch, "the store checkpoint '" + rd.store().string() + "' holds module " +
                                  std::to_string(m) + " at round " +
                                  std::to_string(store.round(m)) + ", not the last round " +
                                  std::to_string(cfg.dipaco.rounds)};
  return {};
}

}  // namespace paco::job
