#pragma once
// worker_file: a path worker's checkpoint (format paco-checkpoint-1, io/checkpoint.hpp): its
// arena — θ at the end of its last round, θ at that round's start (anchor), the inner
// optimizer's moments and the error-feedback residual — under the model's tensor names, with
// its inner step, the last round it completed and the caller's configuration fingerprint. A
// worker that restarts is built with start_step = the file's step and gets its optimizer state
// and residual back (restore_worker_state): its next round pulls from the store as usual. A
// host worker's file also records where its data sampler stood ("sampler"), and restoring
// seeks it there, so a resumed worker draws the batches it would have drawn.
//
// A checkpoint is bound to its place: it records whose it is (worker_identity: the run's id,
// the worker, its path), and loading it for another run, worker or path is an error naming the
// file — a checkpoint copied from another run directory, or two workers' files swapped, is
// never trained on as if it were this worker's.

#include <filesystem>
#include <map>
#include <string>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/core/rng.hpp"
#include "paco/io/checkpoint.hpp"
#include "paco/train/path_worker.hpp"

namespace paco::train {

// Whose a worker checkpoint is: the run (an id its run directory was prepared with), the worker
// and the path it trains.
struct worker_identity {
  std::string run;
  int worker = 0;
  int path = 0;
  std::map<std::string, std::string> metadata() const {
    return {{"run", run}, {"worker", std::to_string(worker)}, {"path", std::to_string(path)}};
  }
};

// Ensures: ok when metadata (a checkpoint's, of `file`) records exactly `who`.
// Errors: corrupt when it records no identity; mismatch naming the file, what it records and
// what was expected (another run; another worker or path).
inline status check_identity(const std::filesystem::path& file,
                             const std::map<std::string, std::string>& metadata,
                             const worker_identity& who) {
  const auto get = [&](const char* k) {
    auto it = metadata.find(k);
    return it == metadata.end() ? std::string() : it->second;
  };
  const std::string run = get("run"), worker = get("worker"), path = get("path");
  if (run.empty() || worker.empty() || path.empty())
    return {errc::corrupt, "worker checkpoint '" + file.string() +
                               "' records no run, worker or path (written by an older paco or "
                               "another tool): start the run over with --fresh"};
  if (run != who.run)
    return {errc::mismatch, "worker checkpoint '" + file.string() + "' belongs to run " + run +
                                ", not to this run (" + who.run +
                                "): it was copied from another run directory"};
  if (worker != std::to_string(who.worker) || path != std::to_string(who.path))
    return {errc::mismatch, "worker checkpoint '" + file.string() + "' is worker " + worker +
                                "'s (path " + path + "), not worker " + std::to_string(who.worker) +
                                "'s (path " + std::to_string(who.path) +
                                "): checkpoint files were swapped"};
  return {};
}

struct worker_checkpoint {
  long step = 0;    // inner steps taken
  long round = -1;  // the last round completed (−1: none recorded)
  std::map<std::string, std::string> metadata;
  arena<host> state;  // the planes as saved
};

// Writes a worker's planes `state`, its inner `step` and `round` (the round it just completed)
// with config, its identity and extra (a device worker's planes, downloaded). Errors:
// save_checkpoint's.
template <class Model>
status save_worker_state(const std::filesystem::path& file, const Model& model,
                         const arena<host>& state, long step, long round, const std::string& config,
                         const worker_identity& who,
                         std::map<std::string, std::string> extra = {}) {
  extra["round"] = std::to_string(round);
  extra["config"] = config;
  for (auto& [k, v] : who.metadata()) extra[k] = v;
  return io::save_checkpoint(file, model.tensors(), state, step, std::move(extra));
}

// Writes w's arena, inner step and `round` with config, identity and extra. Errors:
// save_checkpoint's.
template <class Model, class InnerOpt>
status save_worker_file(const std::filesystem::path& file, const Model& model,
                        train::path_worker<Model, InnerOpt>& w, long round,
                        const std::string& config, const worker_identity& who,
                        std::map<std::string, std::string> extra = {}) {
  extra["sampler"] = rng::to_hex(w.position().sampler);
  return save_worker_state(file, model, w.state(), w.inner_step(), round, config, who,
                           std::move(extra));
}

// Reads worker `who`'s checkpoint. Errors name the file: load_checkpoint's (missing,
// truncated, corrupt, another format), check_config's (written for another configuration),
// check_identity's (another run, worker or path), corrupt (a round that is not a number).
template <class Model>
result<worker_checkpoint> load_worker_file(const std::filesystem::path& file, const Model& model,
                                           const std::string& config, const worker_identity& who) {
  worker_checkpoint ck{0, -1, {}, arena<host>(model.layout())};
  auto info = io::load_checkpoint(file, model.tensors(), ck.state);
  if (!info) return info.error();
  if (auto s = io::check_config(file, info->metadata, config); !s) return s.error();
  if (auto s = check_identity(file, info->metadata, who); !s) return s.error();
  ck.step = info->step;
  ck.metadata = info->metadata;
  if (auto r = ck.metadata.find("round"); r != ck.metadata.end()) {
    try {
      std::size_t used = 0;
      ck.round = std::stol(r->second, &used);
      if (used != r->second.size()) throw std::invalid_argument(r->second);
    } catch (const std::exception&) {
      return error(errc::corrupt, "worker checkpoint '" + file.string() +
                                      "' records an invalid round '" + r->second + "'");
    }
  }
  return ck;
}

// Gives w back θ and θ_start (a blocking worker's next pull overwrites both; an overlapped one
// lands on them), the inner optimizer's moments, when both w and the checkpoint keep one the
// error-feedback residual, and when the file records it the sampler's position. Requires: w
// was built with start_step = ck.step for the same model.
template <class Model, class InnerOpt>
void restore_worker_state(const worker_checkpoint& ck, train::path_worker<Model, InnerOpt>& w) {
  if (auto it = ck.metadata.find("sampler"); it != ck.metadata.end())
    if (auto at = rng::from_hex(it->second)) w.seek({ck.step, *at});
  for (auto pl : {plane::param, plane::anchor, plane::moment1, plane::moment2, plane::residual}) {
    if (!ck.state.has(pl)) continue;
    if (pl == plane::residual && !w.state().has(pl)) continue;
    auto src = ck.state.get(pl);
    auto dst = w.state().get(pl);
    std::copy(src.begin(), src.end(), dst.begin());
  }
}

}  // namespace paco::train
