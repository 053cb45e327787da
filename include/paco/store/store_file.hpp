#pragma once
// store_file: a module store's checkpoint (format paco-store-1), written atomically and
// checksummed like every safetensors file paco writes. Tensors `module.M.theta` and
// `module.M.outer_state` for every module M; metadata
//   rounds  each module's round (JSON list)
//   layout  what the flat vectors are, so the file can be read without paco's C++: the grid
//           ("2x2") and per module its level, expert, offset and size in the model's arena and
//           the model tensors (entries) its span covers, in order (JSON)
//   config  the caller's configuration fingerprint (compared on load: io::check_config)
// plus what the caller adds. paco_train's store writes it after every round close; --export
// turns it into one model file per path (nn/gpt_file.hpp).

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"
#include "paco/io/checkpoint.hpp"
#include "paco/io/json_read.hpp"
#include "paco/io/safetensors.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/store/module_store.hpp"

namespace paco::store {

inline constexpr const char* store_file_format = "paco-store-1";

// The layout metadata of a plan (see above).
inline std::string store_layout_json(const path::path_plan& plan) {
  nlohmann::ordered_json mods = nlohmann::ordered_json::array();
  for (int m = 0; m < plan.modules(); ++m) {
    const auto& sp = plan.span_of(m);
    mods.push_back({{"module", m},
                    {"level", plan.level_of(m)},
                    {"expert", plan.expert_of(m)},
                    {"offset", sp.offset},
                    {"size", sp.size},
                    {"entries", sp.entries}});
  }
  return nlohmann::ordered_json{{"grid", plan.describe()}, {"modules", mods}}.dump();
}

// Writes every module's θ, outer state and round. Errors: save_safetensors'.
template <class OuterOpt>
status save_store_file(const std::filesystem::path& file, const module_store<OuterOpt>& st,
                       const path::path_plan& plan, const std::string& config,
                       std::map<std::string, std::string> extra = {}) {
  std::vector<std::vector<float>> keep;
  keep.reserve(2 * std::size_t(st.module_count()));
  std::vector<io::tensor_ref> refs;
  nlohmann::json rounds = nlohmann::json::array();
  for (int m = 0; m < st.module_count(); ++m) {
    auto snap = st.save(m);
    rounds.push_back(snap.round);
    keep.push_back(std::move(snap.theta));
    refs.push_back(
        {"module." + std::to_string(m) + ".theta", {keep.back().size()}, keep.back().data()});
    keep.push_back(std::move(snap.state));
    refs.push_back(
        {"module." + std::to_string(m) + ".outer_state", {keep.back().size()}, keep.back().data()});
  }
  extra["format"] = store_file_format;
  extra["rounds"] = rounds.dump();
  extra["layout"] = store_layout_json(plan);
  extra["config"] = config;
  return io::save_safetensors(file, refs, std::move(extra));
}

// Restores every module of st from a file save_store_file wrote. Errors name the file and the
// problem: missing or truncated (load_safetensors'), corrupt (no checksum, one that disagrees,
// another format, no rounds, rounds that are not JSON, a round that is not an integer ≥ 0),
// too_large (rounds nested deeper than io::json_max_depth levels), written for another
// configuration (check_config's), or another layout (a module missing, of another size, or a layout
// record that differs from the plan's), or a metadata value of `bound` (e.g. the run's id) that the
// file records differently (a file that records none of a key was written before it was bound).
template <class OuterOpt>
status load_store_file(const std::filesystem::path& file, module_store<OuterOpt>& st,
                       const path::path_plan& plan, const std::string& config,
                       const std::map<std::string, std::string>& bound = {}) {
  const std::string what = "store checkpoint '" + file.string() + "'";
  auto f = io::load_safetensors(file);
  if (!f) return f.error();
  if (!f->metadata.count(io::checksum_key)) return {errc::corrupt, what + " carries no checksum"};
  if (auto fmt = f->metadata.find("format");
      fmt == f->metadata.end() || fmt->second != store_file_format)
    return {errc::corrupt, what + " is not a " + store_file_format + " file"};
  if (auto s = io::check_config(file, f->metadata, config); !s) return s;
  if (auto l = f->metadata.find("layout");
      l != f->metadata.end() && l->second != store_layout_json(plan))
    return {errc::mismatch, what + " was written for another grid or model layout"};
  for (const auto& [key, want] : bound)
    if (auto b = f->metadata.find(key); b != f->metadata.end() && b->second != want)
      return {errc::mismatch, what + " belongs to " + key + " '" + b->second + "', not to '" +
                                  want + "' (a file of another run, copied here?)"};
  auto it = f->metadata.find("rounds");
  if (it == f->metadata.end()) return {errc::corrupt, what + " records no rounds"};
  // Nesting bounded and every round an integer ≥ 0, checked before narrowing (io/json_read.hpp).
  const auto parsed = io::json_parse(it->second, what + " metadata \"rounds\"");
  if (!parsed) return parsed.error();
  const nlohmann::json& rounds = *parsed;
  if (!rounds.is_array() || int(rounds.size()) != st.module_count())
    return {errc::mismatch, what + " has a different number of modules"};
  for (int m = 0; m < st.module_count(); ++m) {
    auto th = f->tensors.find("module." + std::to_string(m) + ".theta");
    auto os = f->tensors.find("module." + std::to_string(m) + ".outer_state");
    if (th == f->tensors.end() || os == f->tensors.end())
      return {errc::mismatch, what + " lacks module " + std::to_string(m)};
    const auto r = io::json_int<long>(rounds[std::size_t(m)], "round", 0);
    if (!r)
      return {errc::corrupt, what + " has an invalid round for module " + std::to_string(m) + " (" +
                                 r.error().message + ")"};
    typename module_store<OuterOpt>::snapshot s{th->second.values, os->second.values, *r};
    if (auto e = st.restore(m, s); !e) return {errc::mismatch, what + ": " + e.error().message};
  }
  return {};
}

}  // namespace paco::store
