#pragma once
// replica_file: the checkpoints of one rank of DiLoCo over an all-reduce (train::round_loop).
// After round k, rank r writes DIR/rank-r.round-k.safetensors (format paco-checkpoint-1,
// io/checkpoint.hpp: a temporary file, fsync, rename, fsync of the directory) and removes its
// file of round k − 2, so that its newest two rounds are on disk: the ranks sync every round,
// so their newest files differ by at most one round, and a run killed between two ranks'
// writes of round k still finds round k − 1 on every rank.
//
// A file holds the rank's arena under the model's tensor names (θ, the anchor, the inner
// optimizer's moments, the error-feedback residual, and the outer optimizer's state in
// plane::outer_momentum), its inner step, and in its metadata the rank, the world size, the
// round, the data sampler's position (4 × 16 hex digits: the rank's batches go on where they
// stood) and the run's configuration fingerprint ("key=value …", io::check_config).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "paco/compress/spec.hpp"
#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/core/rng.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/checkpoint.hpp"

namespace paco::train {

// DIR/rank-R.round-K.safetensors.
inline std::filesystem::path replica_file(const std::filesystem::path& dir, int rank, long round) {
  return dir /
         ("rank-" + std::to_string(rank) + ".round-" + std::to_string(round) + ".safetensors");
}

// The rounds of rank's files in dir, ascending. Ensures: empty when dir holds none or does not
// exist; names that are not replica_file(dir, rank, k) for some k ≥ 0 are ignored.
inline std::vector<long> replica_rounds(const std::filesystem::path& dir, int rank) {
  namespace fs = std::filesystem;
  std::vector<long> rounds;
  std::error_code ec;
  const std::string head = "rank-" + std::to_string(rank) + ".round-", tail = ".safetensors";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() <= head.size() + tail.size() || n.rfind(head, 0) != 0 ||
        n.compare(n.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string k = n.substr(head.size(), n.size() - head.size() - tail.size());
    if (k.find_first_not_of("0123456789") != std::string::npos || k.size() > 15) continue;
    rounds.push_back(std::stol(k));
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds;
}

// Whether a run compressed by `spec` can be checkpointed: every piece of its state must be in
// the arena. Errors: unsupported for PowerSGD (its warm-started Q) and L-GreCo (its statistics
// and levels), which keep state across rounds inside the codec.
inline status checkpointable(const compress::compress_spec& spec) {
  if (spec.kind == compress::codec_kind::powersgd)
    return {errc::unsupported, "compress = " + compress::to_string(spec) +
                                   " keeps PowerSGD's warm-started Q in its codec across rounds, "
                                   "which a checkpoint does not hold"};
  if (spec.lgreco)
    return {errc::unsupported, "compress = " + compress::to_string(spec) +
                                   " keeps L-GreCo's statistics and levels in its codec across "
                                   "rounds, which a checkpoint does not hold"};
  return {};
}

// One rank's checkpoint as read back.
struct replica_checkpoint {
  long step = 0;              // inner steps taken
  long round = 0;             // the round it was written after (0, 1, …)
  rng::state_type sampler{};  // where the rank's data sampler stood
  std::map<std::string, std::string> metadata;
  arena<host> state;  // the planes as saved
};

// Writes rank's checkpoint of `round` to `file`: state's planes (all but grad), the inner step,
// and rank, size, round, the sampler's position and config in its metadata. A failed write is
// tried again, `attempts` times in all (io::with_retries). Requires: attempts ≥ 1. Ensures:
// file is the previous version or the new one, never partial. Errors: the last attempt's (io),
// the file named.
template <class Model>
status save_replica_file(const std::filesystem::path& file, const Model& model,
                         const arena<host>& state, long step, const rng::state_type& sampler,
                         long round, int rank, int size, const std::string& config,
                         int attempts = 3) {
  const std::map<std::string, std::string> meta{{"rank", std::to_string(rank)},
                                                {"size", std::to_string(size)},
                                                {"round", std::to_string(round)},
                                                {"sampler", rng::to_hex(sampler)},
                                                {"config", config}};
  auto s = io::with_retries(
      [&] { return io::save_checkpoint(file, model.tensors(), state, step, meta); }, attempts,
      std::chrono::milliseconds(100));
  if (s) return s;
  return paco::error{s.error().code,
                     "checkpoint '" + file.string() + "' not written: " + s.error().message};
}

// Reads the checkpoint `file` of rank of size ranks, written after `round` with `config`.
// Errors name the file: load_checkpoint's (not_found for a missing file; a truncated, corrupt
// or foreign file), check_config's (mismatch naming the first item that differs), mismatch for
// a file of another rank, world size or round.
template <class Model>
result<replica_checkpoint> load_replica_file(const std::filesystem::path& file, const Model& model,
                                             int rank, int size, long round,
                                             const std::string& config) {
  replica_checkpoint ck{0, round, {}, {}, arena<host>(model.layout())};
  auto info = io::load_checkpoint(file, model.tensors(), ck.state);
  if (!info) return info.error();
  if (auto s = io::check_config(file, info->metadata, config); !s) return s.error();
  for (const auto& [key, want] :
       {std::pair<const char*, long>{"rank", rank}, {"size", long(size)}, {"round", round}}) {
    auto it = info->metadata.find(key);
    const std::string got = it == info->metadata.end() ? "(absent)" : it->second;
    if (got != std::to_string(want))
      return error(errc::mismatch, "checkpoint '" + file.string() + "' was written with " + key +
                                       " " + got + ", expected " + std::to_string(want));
  }
  auto sp = info->metadata.find("sampler");
  const auto at = sp == info->metadata.end() ? std::nullopt : rng::from_hex(sp->second);
  if (!at)
    return error(errc::corrupt,
                 "checkpoint '" + file.string() + "' records no valid sampler position");
  ck.sampler = *at;
  ck.step = info->step;
  ck.metadata = std::move(info->metadata);
  return ck;
}

}  // namespace paco::train
