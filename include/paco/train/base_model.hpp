#pragma once
// base_model: the shared starting point of every row of a comparison (DiPaCo §2.4: also the
// router's frozen feature extractor) — pretrained once, or loaded from a checkpoint that was
// written for the same configuration. The configuration is a caller-made key string (corpus,
// model shape, pretraining schedule, seed …) kept in the checkpoint's metadata: a file written
// for another configuration is never used.
//
//   auto b = train::load_or_pretrain(model, base, {.file = f, .key = k, .step = n}, seed,
//                                    [&](arena<host>& a) { train::dense_run(model, a, …); });

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <type_traits>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/io/checkpoint.hpp"
#include "paco/train/concepts.hpp"

namespace paco::train {

struct base_checkpoint {
  std::filesystem::path file;  // empty: no cache, always pretrain
  std::string key;             // the configuration; stored as metadata "base_key"
  long step = 0;               // pretraining steps, stored as the checkpoint's step
};

enum class base_origin {
  loaded,      // the file held this configuration's base model
  pretrained,  // no file (or none given): pretrained, and saved when a file was given
  replaced,    // the file held another configuration (or did not load): pretrained and saved
};

struct base_model {
  base_origin origin = base_origin::pretrained;
  status saved;  // the save's error, if saving a pretrained model failed
};

// A configuration key (base_checkpoint::key) from the values that define the base model: each
// string as is, each number by std::to_string, joined by '/'.
// Ensures: base_key(std::string("a:"), 1, 2.5f) == "a:/1/2.500000".
template <class... V>
std::string base_key(const V&... values) {
  std::string k;
  [[maybe_unused]] auto add = [&](const auto& v) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(v)>>)
      k += std::to_string(v) + "/";
    else
      k += std::string(v) + "/";
  };
  (add(values), ...);
  if (!k.empty()) k.pop_back();
  return k;
}

// The base model in `a`: its parameters loaded from ck.file when that exists and its "base_key"
// equals ck.key; otherwise model.init(a, seed), pretrain(a), and — when ck.file is not empty —
// saved there with its moments zeroed (metadata base_key = ck.key, step = ck.step).
// Requires: `a` laid out by model.layout(). Ensures: a loaded model's parameters are bit for bit
// those saved; a pretrained one's are init(seed) then pretrain's, whatever the file held.
template <Model M>
base_model load_or_pretrain(const M& model, arena<host>& a, const base_checkpoint& ck,
                            std::uint64_t seed, const std::function<void(arena<host>&)>& pretrain) {
  base_model b;
  model.init(a, seed);
  std::error_code ec;
  if (!ck.file.empty() && std::filesystem::exists(ck.file, ec)) {
    auto info = io::load_checkpoint(ck.file, model.tensors(), a);
    if (info && info->metadata.count("base_key") && info->metadata.at("base_key") == ck.key) {
      b.origin = base_origin::loaded;
      return b;
    }
    model.init(a, seed);
    b.origin = base_origin::replaced;
  }
  pretrain(a);
  if (!ck.file.empty()) {
    a.zero(plane::moment1);
    a.zero(plane::moment2);
    b.saved = io::save_checkpoint(ck.file, model.tensors(), a, ck.step, {{"base_key", ck.key}});
  }
  return b;
}

// Writes to `out` where a loaded or replaced base model came from: "base model loaded from
// <file>" or "<file> does not hold this configuration's base model; pretraining"; nothing for a
// model pretrained without a file to read.
inline void print_base_origin(std::FILE* out, const base_model& b, const std::string& file) {
  if (b.origin == base_origin::loaded)
    std::fprintf(out, "base model loaded from %s\n", file.c_str());
  if (b.origin == base_origin::replaced)
    std::fprintf(out, "%s does not hold this configuration's base model; pretraining\n",
                 file.c_str());
}

}  // namespace paco::train
