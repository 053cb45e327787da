#pragma once
// stage_file: one pipeline stage's checkpoint (format paco-stage-checkpoint-1), one safetensors
// file written atomically and checksummed: the stage's span of the model's planes (θ and the
// AdamW moments, under the model's tensor names), its auxiliary head (parameters and moments),
// the shared_readout copy it applies, and on the last stage the readout copies still in flight
// (stage_runner::readouts_in_flight); with the step, where the batch sampler stands, the
// configuration's fingerprint and whose it is (stage_identity: the run, the stage, how many).
//
// A run resumes from the newest step every stage holds (newest_common_step): all stages restart
// from checkpoints of that one step (stage_runner::resume_at), and the run continues bit for bit.
// Stages write at multiples of one period and run at most a few steps apart, so each keeps its
// newest stage_files_to_keep() files (prune_stage_files): enough that a common step survives
// whichever stage dies.
//
//   pipeline::save_stage_file(dir / pipeline::stage_file_name(k, t), model, a,
//                             pipeline::parts_of(loop.runner()),
//                             loop.runner().readouts_in_flight(), {t, loop.where().sampler},
//                             config, who);
//   auto r = pipeline::load_stage_file(file, model, a, parts, config, who);  // then
//   loop.seek({r->at.step, r->at.sampler}, std::move(r->in_flight));

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/core/rng.hpp"
#include "paco/io/checkpoint.hpp"
#include "paco/io/safetensors.hpp"
#include "paco/pipeline/stage_runner.hpp"

namespace paco::pipeline {

inline constexpr const char* stage_checkpoint_format = "paco-stage-checkpoint-1";

// Whose a stage checkpoint is: the run, the stage and the pipeline's length, and which of the
// run's pipelines (group: empty for a pipeline job's one pipeline; "worker-3" for the stages of
// DiPaCo worker 3's path). The group also prefixes the file's name (stage_file_name).
struct stage_identity {
  std::string run;
  int stage = 0;
  int stages = 1;
  std::string group;
  std::map<std::string, std::string> metadata() const {
    return {{"run", run},
            {"stage", std::to_string(stage)},
            {"stages", std::to_string(stages)},
            {"group", group}};
  }
};

// Where a stage stands: steps taken and its batch sampler's position after them.
struct stage_position {
  long step = 0;
  rng::state_type sampler{};
};

// What of a stage a checkpoint holds beyond its position: its span of the model's arena, its
// auxiliary head's arena (null: none), the readout copy it applies (empty: none).
struct stage_parts {
  std::pair<std::size_t, std::size_t> span{};
  arena<host>* head = nullptr;
  std::span<float> readout;
};

// A stage_runner's parts (its head and readout only where it has them).
template <nn::BlockModel M, net::Transport T>
stage_parts parts_of(stage_runner<M, T>& run) {
  auto& l = run.learner();
  const bool headed = l.head_arena().layout().total() > 0;
  return {
      run.stage_of().span(), headed ? &l.head_arena() : nullptr,
      l.shares_readout() ? std::span<float>(l.readout(), l.readout_size()) : std::span<float>{}};
}

// What a stage resumes with.
struct stage_resume {
  stage_position at;
  std::vector<readout_copy> in_flight;
  std::map<std::string, std::string> metadata;  // the file's (the caller's extra included)
};

namespace detail {
inline std::string group_prefix(const std::string& group) {
  return group.empty() ? std::string() : group + ".";
}
}  // namespace detail

// "stage-1.step-40.safetensors"; in a group, "worker-3.stage-1.step-40.safetensors".
inline std::string stage_file_name(int stage, long step, const std::string& group = {}) {
  return detail::group_prefix(group) + "stage-" + std::to_string(stage) + ".step-" +
         std::to_string(step) + ".safetensors";
}

// The steps of stage's files (of group) in dir, ascending (by name; their content is checked on
// load).
inline std::vector<long> stage_file_steps(const std::filesystem::path& dir, int stage,
                                          const std::string& group = {}) {
  std::vector<long> steps;
  std::error_code ec;
  const std::string pre = detail::group_prefix(group) + "stage-" + std::to_string(stage) + ".step-",
                    post = ".safetensors";
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (!n.starts_with(pre) || !n.ends_with(post) || n.size() <= pre.size() + post.size()) continue;
    const std::string digits = n.substr(pre.size(), n.size() - pre.size() - post.size());
    if (digits.size() > 15 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    steps.push_back(std::stol(digits));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// How many files each stage keeps so that a step common to every stage survives: stages write
// every `every` steps and the first runs at most `ahead` steps past the last ((K − 1)·q with local
// losses, 1 with global backprop). Requires: every ≥ 1, ahead ≥ 0.
inline int stage_files_to_keep(long every, long ahead) {
  return int(2 + ahead / every);
}

// Removes all but stage's newest `keep` files (of group) in dir. Ensures: nothing else is
// touched.
inline void prune_stage_files(const std::filesystem::path& dir, int stage, int keep,
                              const std::string& group = {}) {
  auto steps = stage_file_steps(dir, stage, group);
  std::error_code ec;
  for (std::size_t i = 0; i + std::size_t(keep) < steps.size(); ++i)
    std::filesystem::remove(dir / stage_file_name(stage, steps[i], group), ec);
}

namespace detail {
// The model's tensors inside span [b, e). Errors: unsupported when they do not tile it exactly.
inline result<std::vector<named_tensor>> tensors_in(const std::vector<named_tensor>& all,
                                                    std::pair<std::size_t, std::size_t> span) {
  std::vector<named_tensor> in;
  std::size_t n = 0;
  for (auto& t : all)
    if (t.offset >= span.first && t.offset + t.size() <= span.second) {
      in.push_back(t);
      n += t.size();
    }
  if (n != span.second - span.first)
    return error(errc::unsupported, "the model's tensors do not tile the stage's span [" +
                                        std::to_string(span.first) + ", " +
                                        std::to_string(span.second) + ")");
  return in;
}
// θ and the moments; a store worker's θ_start and residual where its arena has them.
inline const plane stage_planes[] = {plane::param, plane::moment1, plane::moment2, plane::anchor,
                                     plane::residual};
inline std::string in_flight_name(long after) {
  return "readout_after/" + std::to_string(after);
}
}  // namespace detail

// Writes the stage's checkpoint: parts of a (and the head, readout), the copies in flight, its
// position, config, identity and the caller's `extra` metadata. Ensures: file is the previous
// one or this one, never partial. Errors: the span's (detail::tensors_in), the write's (naming
// the file).
template <class Model>
status save_stage_file(const std::filesystem::path& file, const Model& model, const arena<host>& a,
                       const stage_parts& parts, const std::vector<readout_copy>& in_flight,
                       const stage_position& at, const std::string& config,
                       const stage_identity& who, std::map<std::string, std::string> extra = {}) {
  auto tensors = detail::tensors_in(model.tensors(), parts.span);
  if (!tensors) return tensors.error();
  std::vector<io::tensor_ref> refs;
  for (plane p : detail::stage_planes)
    if (a.has(p))
      for (auto& t : *tensors)
        refs.push_back({io::plane_tensor_name(p, t.name), t.shape, a.get(p).data() + t.offset});
  if (parts.head)
    for (plane p : detail::stage_planes)
      if (parts.head->has(p))
        refs.push_back({io::plane_tensor_name(p, "aux_head"),
                        {parts.head->layout().total()},
                        parts.head->get(p).data()});
  if (!parts.readout.empty())
    refs.push_back({"readout", {parts.readout.size()}, parts.readout.data()});
  for (auto& c : in_flight)
    refs.push_back({detail::in_flight_name(c.after), {c.values.size()}, c.values.data()});
  auto meta = std::move(extra);
  for (auto& [k, v] : who.metadata()) meta[k] = v;
  meta["format"] = stage_checkpoint_format;
  meta["step"] = std::to_string(at.step);
  meta["sampler"] = rng::to_hex(at.sampler);
  meta["config"] = config;
  return io::save_safetensors(file, refs, std::move(meta));
}

// Reads stage who.stage's checkpoint into a's span and parts. Errors name the file: the read's
// (missing, truncated, checksum), version (another format), check_config's, mismatch for another
// run / stage / pipeline or a tensor missing or of another shape, corrupt for a bad step or
// sampler. On error, a and parts may be partly written: the caller does not train on them.
template <class Model>
result<stage_resume> load_stage_file(const std::filesystem::path& file, const Model& model,
                                     arena<host>& a, const stage_parts& parts,
                                     const std::string& config, const stage_identity& who) {
  const std::string name = "stage checkpoint '" + file.string() + "'";
  auto f = io::load_safetensors(file);
  if (!f) return f.error();
  auto& md = f->metadata;
  auto get = [&](const char* k) {
    auto it = md.find(k);
    return it == md.end() ? std::string() : it->second;
  };
  if (!md.count(io::checksum_key))
    return error(errc::corrupt, name + " carries no checksum (not written by paco, or edited)");
  if (get("format") != stage_checkpoint_format)
    return error(errc::version, name + " is not a " + stage_checkpoint_format + " file");
  if (auto s = io::check_config(file, md, config); !s) return s.error();
  for (auto& [k, v] : who.metadata())
    if (get(k.c_str()) != v)
      return error(errc::mismatch, name + " records " + k + " '" + get(k.c_str()) + "', not '" + v +
                                       "': it belongs to another " +
                                       (k == "run" ? "run" : "stage of the pipeline"));
  stage_resume r;
  r.metadata = md;
  try {
    std::size_t used = 0;
    const std::string st = get("step");
    r.at.step = std::stol(st, &used);
    if (used != st.size() || r.at.step < 0) throw std::invalid_argument(st);
  } catch (const std::exception&) {
    return error(errc::corrupt, name + " records no valid step");
  }
  auto sampler = rng::from_hex(get("sampler"));
  if (!sampler) return error(errc::corrupt, name + " records no valid sampler position");
  r.at.sampler = *sampler;
  auto take = [&](const std::string& n, float* dst, std::size_t size) -> status {
    auto it = f->tensors.find(n);
    if (it == f->tensors.end()) return {errc::mismatch, name + " lacks tensor '" + n + "'"};
    if (it->second.values.size() != size)
      return {errc::mismatch, name + ": tensor '" + n + "' holds " +
                                  std::to_string(it->second.values.size()) + " floats, not " +
                                  std::to_string(size)};
    std::copy(it->second.values.begin(), it->second.values.end(), dst);
    return {};
  };
  auto tensors = detail::tensors_in(model.tensors(), parts.span);
  if (!tensors) return tensors.error();
  for (plane p : detail::stage_planes) {
    const bool saved = f->tensors.count(io::plane_tensor_name(p, tensors->front().name)) > 0;
    if (!saved && p != plane::param) continue;  // moments before the first step
    for (auto& t : *tensors)
      if (auto s = take(io::plane_tensor_name(p, t.name), a.get(p).data() + t.offset, t.size()); !s)
        return s.error();
  }
  if (parts.head)
    for (plane p : detail::stage_planes) {
      const std::string n = io::plane_tensor_name(p, "aux_head");
      if (!f->tensors.count(n) && p != plane::param) continue;
      if (auto s = take(n, parts.head->get(p).data(), parts.head->layout().total()); !s)
        return s.error();
    }
  if (!parts.readout.empty())
    if (auto s = take("readout", parts.readout.data(), parts.readout.size()); !s) return s.error();
  const std::string pre = "readout_after/";
  for (auto& [n, t] : f->tensors)
    if (n.starts_with(pre)) {
      readout_copy c;
      try {
        c.after = std::stol(n.substr(pre.size()));
      } catch (const std::exception&) {
        return error(errc::corrupt, name + ": tensor '" + n + "' names no step");
      }
      c.values = t.values;
      r.in_flight.push_back(std::move(c));
    }
  std::sort(r.in_flight.begin(), r.in_flight.end(),
            [](const readout_copy& x, const readout_copy& y) { return x.after < y.after; });
  return r;
}

// The newest step for which every stage 0 … stages−1 (of group) has a file in dir that reads as
// its own (checksum, format, run, stage, group: the tensors are checked when the stage loads it);
// nullopt when there is none (the run starts over). Files that do not read are skipped, not
// deleted.
inline std::optional<long> newest_common_step(const std::filesystem::path& dir, int stages,
                                              const std::string& run,
                                              const std::string& group = {}) {
  std::vector<long> common = stage_file_steps(dir, 0, group);
  for (int k = 1; k < stages; ++k) {
    const auto s = stage_file_steps(dir, k, group);
    std::vector<long> both;
    std::set_intersection(common.begin(), common.end(), s.begin(), s.end(),
                          std::back_inserter(both));
    common = std::move(both);
  }
  for (auto it = common.rbegin(); it != common.rend(); ++it) {
    bool all = true;
    for (int k = 0; k < stages && all; ++k) {
      auto f = io::load_safetensors(dir / stage_file_name(k, *it, group));
      const stage_identity who{run, k, stages, group};
      all = f && f->metadata.count(io::checksum_key);
      for (auto& [key, v] : who.metadata())
        all = all && (f->metadata.count(key) ? f->metadata.at(key) : std::string()) == v;
    }
    if (all) return *it;
  }
  return std::nullopt;
}

}  // namespace paco::pipeline
