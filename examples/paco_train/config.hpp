#pragma once
// paco_train's configuration: aggregates with defaults, read from a TOML file plus
// "section.key=value" overrides. Unknown sections or keys and out-of-range values are errors
// naming the field and the accepted range: first the type's (an integer too large for its
// field is refused, never narrowed; nan and ±inf are refused everywhere), then the field's own
// (validate()).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "paco/core/error.hpp"
#include "paco/core/spelling.hpp"
#include "paco/io/text_corpus.hpp"
#include "paco/job/settings.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/outer/co2.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/pipeline/activation_codec.hpp"
#include "paco/pipeline/path_stages.hpp"
#include "paco/pipeline/schedule.hpp"
#include "paco/pipeline/stage_plan.hpp"
#include "paco/pipeline/stage_runner.hpp"
#include "paco/store/compression.hpp"
#include "paco/train/sync.hpp"

namespace paco_train {

using paco::errc;
using paco::error;
using paco::result;
namespace job = paco::job;

// The job's sections (job/settings.hpp) plus the model and which job runs.
using job::compression_of;
using job::data_path;
using job::data_section;
using job::dipaco_section;
using job::launch_section;
using job::load_data;
using job::output_section;
using job::parse_throttle;
using job::pipeline_section;
using job::sync_section;
using job::train_section;

struct job_section {
  std::string mode = "lm";  // "lm": one model; "dipaco": a grid of paths, store + workers;
                            // "pipeline": one model cut into stages, one process per stage
};

struct train_config : job::settings {
  paco::nn::gpt_config model{.vocab = 256, .ctx = 256, .d = 256, .layers = 4, .heads = 4};
  job_section job;
};

namespace detail {

struct field {
  std::function<paco::status(const toml::node&)> set;
};

// The node's value as written, for errors: 4294967299, inf, '1e400' (an override that TOML
// could not read as a number arrives as a string), a table.
inline std::string shown(const toml::node& n) {
  std::ostringstream os;
  if (auto* i = n.as_integer())
    os << i->get();
  else if (auto* f = n.as_floating_point())
    os << f->get();
  else if (auto* s = n.as_string())
    os << "'" << s->get() << "'";
  else if (auto* b = n.as_boolean())
    os << (b->get() ? "true" : "false");
  else
    os << "a " << n.type();
  return os.str();
}

// "an integer in [-2147483648, 2147483647]": what an integer field of type T holds.
template <class T>
std::string integer_range() {
  return "an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
         std::to_string(std::numeric_limits<T>::max()) + "]";
}

// Sets dst from a TOML value. Ensures: dst holds exactly the value written, or is unchanged and
// the error names `key`: an integer outside T's range (never narrowed), a floating value that
// is nan or ±inf ("must be a finite number"), or outside float's range for a float field.
// Each field's own range is validate()'s.
template <class T>
paco::status assign(T& dst, const toml::node& n, const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) {
    if (auto v = n.value<bool>()) return dst = *v, paco::status{};
    return {errc::invalid_argument, key + " must be true or false"};
  } else if constexpr (std::is_integral_v<T>) {
    if (auto v = n.value<std::int64_t>(); v && std::in_range<T>(*v))
      return dst = T(*v), paco::status{};
    return {errc::invalid_argument, key + " must be " + integer_range<T>() + ", got " + shown(n)};
  } else if constexpr (std::is_floating_point_v<T>) {
    auto v = n.value<double>();
    if (!v || !std::isfinite(*v))
      return {errc::invalid_argument, key + " must be a finite number, got " + shown(n)};
    if (std::abs(*v) > double(std::numeric_limits<T>::max())) {
      std::ostringstream os;
      os << key << " must be a finite number in [" << -std::numeric_limits<T>::max() << ", "
         << std::numeric_limits<T>::max() << "] (a float), got " << shown(n);
      return {errc::invalid_argument, os.str()};
    }
    return dst = T(*v), paco::status{};
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    auto* a = n.as_array();
    if (!a) return {errc::invalid_argument, key + " must be an array of strings"};
    std::vector<std::string> out;
    for (auto& e : *a) {
      auto v = e.value<std::string>();
      if (!v)
        return {errc::invalid_argument, key + " must be an array of strings, got " + shown(e)};
      out.push_back(*v);
    }
    dst = std::move(out);
    return {};
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    auto* a = n.as_array();
    if (!a) return {errc::invalid_argument, key + " must be an array of integers, e.g. [2, 2]"};
    std::vector<int> out;
    for (auto& e : *a) {
      auto v = e.value<std::int64_t>();
      if (!v || !std::in_range<int>(*v))
        return {errc::invalid_argument,
                key + " must be an array of " + integer_range<int>() + ", got " + shown(e)};
      out.push_back(int(*v));
    }
    dst = std::move(out);
    return {};
  } else {
    if (auto v = n.value<std::string>()) return dst = *v, paco::status{};
    return {errc::invalid_argument, key + " must be a string"};
  }
}

}  // namespace detail

// The table of every settable key, "section.key" → setter.
inline std::map<std::string, detail::field> fields(train_config& c) {
  std::map<std::string, detail::field> f;
  auto add = [&](const std::string& k, auto& dst) {
    f[k] = {[&dst, k](const toml::node& n) { return detail::assign(dst, n, k); }};
  };
  add("model.vocab", c.model.vocab);
  add("model.ctx", c.model.ctx);
  add("model.d", c.model.d);
  add("model.layers", c.model.layers);
  add("model.heads", c.model.heads);
  add("model.mlp_mult", c.model.mlp_mult);
  add("model.tie_weights", c.model.tie_weights);
  add("model.init_std", c.model.init_std);
  auto& t = c.train;
  add("train.batch", t.batch);
  add("train.steps", t.steps);
  add("train.budget_s", t.budget_s);
  add("train.lr", t.lr);
  add("train.min_lr", t.min_lr);
  add("train.warmup", t.warmup);
  add("train.weight_decay", t.weight_decay);
  add("train.beta1", t.beta1);
  add("train.beta2", t.beta2);
  add("train.grad_clip", t.grad_clip);
  add("train.optimizer", t.optimizer);
  add("train.muon_lr", t.muon_lr);
  add("train.muon_momentum", t.muon_momentum);
  add("train.threads", t.threads);
  add("train.device", t.device);
  add("train.gemm", t.gemm);
  add("train.seed", t.seed);
  add("train.eval_every", t.eval_every);
  add("train.eval_batches", t.eval_batches);
  add("train.checkpoint_every", t.checkpoint_every);
  add("data.corpus", c.data.corpus);
  add("data.path", c.data.path);
  add("data.dir", c.data.dir);
  add("data.text_field", c.data.text_field);
  add("output.dir", c.output.dir);
  add("job.mode", c.job.mode);
  auto& d = c.dipaco;
  add("dipaco.grid", d.grid);
  add("dipaco.workers_per_path", d.workers_per_path);
  add("dipaco.rounds", d.rounds);
  add("dipaco.inner_steps", d.inner_steps);
  add("dipaco.pretrain_steps", d.pretrain_steps);
  add("dipaco.outer", d.outer);
  add("dipaco.outer_lr", d.outer_lr);
  add("dipaco.outer_momentum", d.outer_momentum);
  add("dipaco.outer_gap_penalty", d.outer_gap_penalty);
  add("dipaco.outer_clip", d.outer_clip);
  add("dipaco.outer_clip_threshold", d.outer_clip_threshold);
  add("dipaco.path_rescale", d.path_rescale);
  add("dipaco.weight_by_shard", d.weight_by_shard);
  add("dipaco.prefix", d.prefix);
  add("dipaco.reroute_every", d.reroute_every);
  add("dipaco.compress", d.compress);
  add("dipaco.lgreco_every", d.lgreco_every);
  add("dipaco.eval_split", d.eval_split);
  add("dipaco.stages", d.stages);
  add("dipaco.stage_split", d.stage_split);
  add("sync.mode", c.sync.mode);
  add("sync.train_budget_s", c.sync.train_budget_s);
  add("sync.overlap_steps", c.sync.overlap_steps);
  add("sync.alpha", c.sync.alpha);
  auto& l = c.launch;
  auto& p = c.pipeline;
  add("pipeline.stages", p.stages);
  add("pipeline.split", p.split);
  add("pipeline.schedule", p.schedule);
  add("pipeline.micro_batches", p.micro_batches);
  add("pipeline.queue_depth", p.queue_depth);
  add("pipeline.head", p.head);
  add("pipeline.readout_refresh", p.readout_refresh);
  add("pipeline.readout_delay", p.readout_delay);
  add("pipeline.hosts", p.hosts);
  add("pipeline.base_port", p.base_port);
  add("pipeline.link_mbps", p.link_mbps);
  add("pipeline.link_latency_ms", p.link_latency_ms);
  add("pipeline.timeout_s", p.timeout_s);
  add("pipeline.eval_tokens", p.eval_tokens);
  add("pipeline.activations", p.activations);
  add("launch.throttle", l.throttle);
  add("launch.mode", l.mode);
  add("launch.store_host", l.store_host);
  add("launch.base_port", l.base_port);
  add("launch.round_timeout_s", l.round_timeout_s);
  add("launch.peer_timeout_s", l.peer_timeout_s);
  add("launch.restarts", l.restarts);
  add("launch.link_mbps", l.link_mbps);
  add("launch.link_latency_ms", l.link_latency_ms);
  add("launch.link_streams", l.link_streams);
  add("launch.link_bdp_bytes", l.link_bdp_bytes);
  add("launch.metrics_port", l.metrics_port);
  add("launch.tls", l.tls);
  add("launch.tls_ca", l.tls_ca);
  add("launch.tls_cert", l.tls_cert);
  add("launch.tls_key", l.tls_key);
  add("launch.tls_peer_name", l.tls_peer_name);
  return f;
}

// How stages train and talk ([pipeline]: schedule, head, activation format, queue, micro-batches,
// links, timeout), for a pipeline job and for a DiPaCo job whose paths are cut into stages:
// through the library's own parsers and pipeline_options::validate. Ensures: ok, or
// invalid_argument naming the field.
inline paco::status validate_stage_training(const train_config& c) {
  namespace pl = paco::pipeline;
  const auto& p = c.pipeline;
  auto bad = [](const std::string& m) { return paco::status(errc::invalid_argument, m); };
  auto sched = pl::parse_schedule(p.schedule);
  if (!sched) return sched.error();
  auto head = pl::parse_head_kind(p.head);
  if (!head) return head.error();
  if (auto f = pl::parse_wire_format(p.activations); !f) return f.error();
  const pl::pipeline_options o{.sched = *sched,
                               .micro_batches = p.micro_batches,
                               .queue_depth = p.queue_depth,
                               .head = *head,
                               .readout_refresh = p.readout_refresh,
                               .readout_delay = p.readout_delay};
  if (auto s = o.validate(c.train.batch); !s)
    return bad(s.error().message + " (train.batch is " + std::to_string(c.train.batch) + ")");
  if (!(p.link_mbps >= 0 && p.link_mbps <= 1e6))
    return bad("pipeline.link_mbps: must be in [0, 1e6] (megabits per second; 0: unlimited)");
  if (!(p.link_latency_ms >= 0 && p.link_latency_ms <= 60000))
    return bad("pipeline.link_latency_ms: must be in [0, 60000] (milliseconds)");
  if (!(p.timeout_s > 0 && p.timeout_s <= 1e6))
    return bad("pipeline.timeout_s: must be in (0, 1e6] (seconds)");
  return {};
}

// The pipeline job's own checks (job.mode = "pipeline"): the stages, split, schedule, head and
// queue through the library's own validation (pipeline/), then the job's ranges.
// Ensures: ok, or invalid_argument naming the field.
inline paco::status validate_pipeline(const train_config& c) {
  namespace pl = paco::pipeline;
  const auto& p = c.pipeline;
  auto bad = [](const std::string& m) { return paco::status(errc::invalid_argument, m); };
  auto plan = p.split.empty() ? pl::stage_plan::equal(c.model.layers, p.stages)
                              : pl::stage_plan::at(p.split, c.model.layers);
  if (!plan) return plan.error();
  if (plan->stages() != p.stages)
    return bad("pipeline.split: " + std::to_string(p.split.size()) + " boundaries make " +
               std::to_string(plan->stages()) + " stages, pipeline.stages is " +
               std::to_string(p.stages) + " (give stages − 1 boundaries)");
  if (p.stages > 64) return bad("pipeline.stages: must be in [1, 64]");
  if (auto s = validate_stage_training(c); !s) return s;
  if (c.model.tie_weights)
    return bad(
        "model.tie_weights: must be false in a pipeline (the last stage's head would share "
        "the first stage's embedding)");
  if (c.train.steps < 1)
    return bad(
        "train.steps: a pipeline trains a fixed number of steps (>= 1); a time budget "
        "(train.steps = 0) is for the lm job");
  if (c.train.device != "cpu") return bad("train.device: a pipeline's stages run on \"cpu\"");
  if (!p.hosts.empty() && int(p.hosts.size()) != p.stages)
    return bad("pipeline.hosts: " + std::to_string(p.hosts.size()) + " hosts for " +
               std::to_string(p.stages) + " stages (one each, or none for loopback)");
  if (p.base_port < 0 || p.base_port + p.stages > 65535)
    return bad("pipeline.base_port: must be in [0, 65535 − stages]");
  if (!(c.launch.peer_timeout_s > 0.2 && c.launch.peer_timeout_s <= 1e6))
    return bad("launch.peer_timeout_s must be in (0.2, 1e6] (seconds)");
  if (p.eval_tokens < 0) return bad("pipeline.eval_tokens: must be >= 0 (0: the whole splits)");
  if (!(c.launch.mode == "local" || c.launch.mode == "manual"))
    return bad("launch.mode must be \"local\" or \"manual\"");
  return {};
}

// A DiPaCo job whose paths are cut into stages (dipaco.stages > 1): the cut through the
// library's own check (pipeline::path_stages, its field names given as dipaco.*), the stages'
// training settings ([pipeline]) through pipeline_options, then what the stages cannot do.
// Ensures: ok, or invalid_argument naming the field.
inline paco::status validate_dipaco_stages(const train_config& c) {
  namespace pl = paco::pipeline;
  const auto& d = c.dipaco;
  const auto& p = c.pipeline;
  auto bad = [](const std::string& m) { return paco::status(errc::invalid_argument, m); };
  if (d.stages < 1) return bad("dipaco.stages: must be >= 1 (1: a process per worker)");
  if (d.stages > 1 && c.train.optimizer != "adamw")
    return bad("train.optimizer: \"" + c.train.optimizer +
               "\" is not supported with dipaco.stages > 1 (the stages of a path step AdamW)");
  if (d.stages == 1) {
    if (!d.stage_split.empty()) return bad("dipaco.stage_split: set only with dipaco.stages > 1");
    return {};
  }
  const paco::nn::gpt model(c.model);
  auto levels = paco::path::split_gpt_levels(model.layout(), c.model.layers, int(d.grid.size()));
  if (!levels) return bad("dipaco.grid: " + levels.error().message);
  if (auto ps = pl::path_stages::make(model, *levels, d.stages, d.stage_split); !ps) {
    std::string m = ps.error().message;
    for (auto [from, to] : {std::pair<std::string, std::string>{"pipeline.stages", "dipaco.stages"},
                            {"pipeline.split", "dipaco.stage_split"}})
      if (m.rfind(from, 0) == 0) m = to + m.substr(from.size());
    return bad(m);
  }
  if (auto s = validate_stage_training(c); !s) return s;
  if (c.train.device != "cpu") return bad("train.device: the stages of a path run on \"cpu\"");
  if (c.sync.mode != "blocking")
    return bad("sync.mode: \"" + c.sync.mode +
               "\" is not supported with dipaco.stages > 1 (the stages of a path sync "
               "blocking rounds)");
  if (c.sync.train_budget_s != 0)
    return bad(
        "sync.train_budget_s: must be 0 with dipaco.stages > 1 (a budget would cut the "
        "stages of a path at different steps)");
  long workers = d.workers_per_path;
  for (int e : d.grid) workers *= e;
  if (p.base_port < 0 || p.base_port + workers * d.stages > 65535)
    return bad("pipeline.base_port: must be in [0, 65535 − workers × dipaco.stages]");
  if (!p.hosts.empty() && int(p.hosts.size()) != d.stages)
    return bad("pipeline.hosts: " + std::to_string(p.hosts.size()) + " hosts for " +
               std::to_string(d.stages) +
               " stages (the host of each stage of every worker, "
               "or none for loopback)");
  return {};
}

// Ensures: ok() iff every field the job reads is in its accepted range; the error names the
// field ("section.key") and the range. Every comparison is false for nan, so a nan set in code
// (load_config refuses it earlier) is refused too.
inline paco::status validate(const train_config& c) {
  if (auto s = c.model.validate(); !s) {  // gpt_config names its fields "gpt_config.x"
    const std::string prefix = "gpt_config.";
    std::string m = s.error().message;
    if (m.rfind(prefix, 0) == 0) m = "model." + m.substr(prefix.size());
    return paco::error(s.error().code, m);
  }
  if (c.model.vocab != 256)
    return {errc::invalid_argument, "model.vocab must be 256 (the byte tokenizer)"};
  auto range = [](bool ok, const char* k, const std::string& r) {
    return ok ? paco::status{}
              : paco::status(errc::invalid_argument, std::string(k) + " must be " + r);
  };
  const auto& t = c.train;
  for (auto s :
       {range(t.batch >= 1 && t.batch <= 4096, "train.batch", "in [1, 4096]"),
        range(t.steps >= 0, "train.steps", ">= 0 (0: fit the budget)"),
        range(t.budget_s > 0 && t.budget_s <= 1e9, "train.budget_s", "in (0, 1e9] (seconds)"),
        range(t.lr > 0 && t.lr < 1, "train.lr", "in (0, 1)"),
        range(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr", "in [0, train.lr]"),
        range(t.warmup >= 0, "train.warmup", ">= 0"),
        range(std::isfinite(t.weight_decay) && t.weight_decay >= 0, "train.weight_decay",
              "a finite number >= 0"),
        range(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "in [0, 1)"),
        range(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "in [0, 1)"),
        range(std::isfinite(t.grad_clip) && t.grad_clip >= 0, "train.grad_clip",
              "a finite number >= 0 (0: off)"),
        range(t.optimizer == "adamw" || t.optimizer == "muon", "train.optimizer",
              "\"adamw\" or \"muon\""),
        range(t.optimizer == "adamw" || (c.job.mode == "dipaco" && t.device == "cpu"),
              "train.optimizer",
              "\"adamw\" unless job.mode = \"dipaco\" on train.device = \"cpu\" (Muon runs "
              "in the DiPaCo and DiLoCo workers on the host)"),
        range(std::isfinite(t.muon_lr) && t.muon_lr > 0 && t.muon_lr < 10, "train.muon_lr",
              "in (0, 10)"),
        range(t.muon_momentum >= 0 && t.muon_momentum < 1, "train.muon_momentum", "in [0, 1)"),
        range(t.threads >= 1 && t.threads <= 256, "train.threads", "in [1, 256]"),
        range(t.device == "cpu" || t.device == "cuda", "train.device", "\"cpu\" or \"cuda\""),
        range(t.gemm == "bf16" || t.gemm == "tf32" || t.gemm == "fp32", "train.gemm",
              "\"bf16\", \"tf32\" or \"fp32\""),
        range(t.eval_every >= 1, "train.eval_every", ">= 1"),
        range(t.eval_batches >= 1, "train.eval_batches", ">= 1"),
        range(t.checkpoint_every >= 1, "train.checkpoint_every", ">= 1"),
        range(c.data.corpus == "brown" || c.data.corpus == "files", "data.corpus",
              "\"brown\" or \"files\""),
        range(c.data.dir.empty() || c.data.path.empty(), "data.dir",
              "unset when data.path is set (it is the older name of data.path)"),
        range(c.data.corpus != "files" || !data_path(c.data).empty(), "data.path",
              "a directory of text files or a JSONL file when data.corpus = \"files\""),
        range(!c.data.text_field.empty(), "data.text_field", "a JSONL field name"),
        range(c.job.mode == "lm" || c.job.mode == "dipaco" || c.job.mode == "pipeline", "job.mode",
              "\"lm\", \"dipaco\" or \"pipeline\"")})
    if (!s) return s;
  if (c.job.mode == "pipeline")
    if (auto s = validate_pipeline(c); !s) return s;
  if (c.job.mode == "dipaco") {
    const auto& d = c.dipaco;
    int paths = 1;
    for (int k : d.grid) paths *= k;
    for (auto s :
         {range(d.grid.size() >= 1 && d.grid.size() <= paco::path::path_plan::max_levels,
                "dipaco.grid", "1 to 8 levels, e.g. [2, 2]"),
          range(std::all_of(d.grid.begin(), d.grid.end(), [](int k) { return k >= 1 && k <= 64; }),
                "dipaco.grid", "experts in [1, 64] per level"),
          range(int(d.grid.size()) <= c.model.layers, "dipaco.grid", "at most model.layers levels"),
          range(d.workers_per_path >= 1 && paths * d.workers_per_path <= 64,
                "dipaco.workers_per_path", "≥ 1 with at most 64 workers in all"),
          range(d.rounds >= 1, "dipaco.rounds", "≥ 1"),
          range(d.inner_steps >= 1, "dipaco.inner_steps", "≥ 1"),
          range(d.pretrain_steps >= 0, "dipaco.pretrain_steps", "≥ 0"),
          range(std::isfinite(d.outer_lr) && d.outer_lr > 0, "dipaco.outer_lr",
                "a finite number > 0"),
          range(d.outer_momentum >= 0 && d.outer_momentum < 1, "dipaco.outer_momentum",
                "in [0, 1)"),
          range(d.path_rescale == "none" || d.path_rescale == "sqrt_paths" ||
                    d.path_rescale == "inv_sqrt_paths",
                "dipaco.path_rescale", "none, sqrt_paths or inv_sqrt_paths"),
          range(d.prefix >= 1 && d.prefix <= c.model.ctx, "dipaco.prefix", "in [1, model.ctx]"),
          range(d.reroute_every >= 0 && d.reroute_every <= c.model.ctx, "dipaco.reroute_every",
                "in [0, model.ctx] (0: off)"),
          range(!c.model.tie_weights || d.grid.size() == 1, "model.tie_weights",
                "false when the grid has several levels"),
          range(c.launch.mode == "local" || c.launch.mode == "manual" || c.launch.mode == "mpi",
                "launch.mode", "\"local\", \"manual\" or \"mpi\""),
          range(c.launch.base_port >= 0 && c.launch.base_port < 65000, "launch.base_port",
                "in [0, 65000)"),
          // Both become milliseconds in a long: bounded well inside it.
          range(c.launch.round_timeout_s > 0 && c.launch.round_timeout_s <= 1e6,
                "launch.round_timeout_s", "in (0, 1e6] (seconds)"),
          range(c.launch.peer_timeout_s > 0.2 && c.launch.peer_timeout_s <= 1e6,
                "launch.peer_timeout_s", "in (0.2, 1e6] (seconds)"),
          range(c.launch.restarts >= 0, "launch.restarts", "≥ 0"),
          range(c.launch.link_mbps >= 0 && c.launch.link_mbps <= 1e6, "launch.link_mbps",
                "in [0, 1e6] (megabits per second; 0: unlimited)"),
          range(c.launch.link_latency_ms >= 0 && c.launch.link_latency_ms <= 60000,
                "launch.link_latency_ms", "in [0, 60000] (milliseconds)"),
          range(c.launch.link_streams >= 1 && c.launch.link_streams <= 16, "launch.link_streams",
                "in [1, 16] (TCP streams per link)"),
          range(!c.launch.tls || c.launch.link_streams == 1, "launch.link_streams",
                "1 when launch.tls = true (TLS links have one stream)"),
          range(c.launch.link_bdp_bytes >= 0 && c.launch.link_bdp_bytes <= 17179869184.0,
                "launch.link_bdp_bytes", "in [0, 16 GiB] (bandwidth x round trip; 0: unknown)"),
          range(c.launch.metrics_port >= 0 && c.launch.metrics_port < 65000, "launch.metrics_port",
                "in [0, 65000) (0: off)"),
          range(!c.launch.tls || !c.launch.tls_ca.empty(), "launch.tls_ca",
                "a CA certificate file when launch.tls = true"),
          range(d.lgreco_every >= 1 && d.lgreco_every <= 1000000, "dipaco.lgreco_every",
                "in [1, 1000000] (rounds)"),
          range(c.sync.train_budget_s >= 0 && c.sync.train_budget_s < c.launch.round_timeout_s,
                "sync.train_budget_s", "in [0, launch.round_timeout_s) (seconds; 0: off)"),
          range(t.device != "cuda" || (c.sync.train_budget_s == 0 && c.launch.throttle.empty()),
                "sync.train_budget_s",
                "0 (and launch.throttle empty) with train.device = \"cuda\"")})
      if (!s) return s;
    auto rule = paco::train::parse_sync(c.sync.mode);
    if (!rule) return {errc::invalid_argument, "sync.mode: " + rule.error().message};
    if (auto s = validate_dipaco_stages(c); !s) return s;
    if (rule->get_if<paco::train::streaming>()) {
      const int levels = int(d.grid.size());
      if (d.inner_steps % levels != 0)
        return {errc::invalid_argument,
                "dipaco.inner_steps must be a multiple of the grid's " + std::to_string(levels) +
                    " levels with sync.mode = \"streaming\" (the levels' modules are its "
                    "fragments, one synced every H / levels steps)"};
      for (const auto& s :
           {range(c.sync.overlap_steps >= 0 && c.sync.overlap_steps < d.inner_steps / levels,
                  "sync.overlap_steps",
                  "in [0, dipaco.inner_steps / levels = " + std::to_string(d.inner_steps / levels) +
                      ") with sync.mode = \"streaming\""),
            range(c.sync.alpha >= 0 && c.sync.alpha <= 1, "sync.alpha", "in [0, 1]"),
            range(c.sync.train_budget_s == 0, "sync.train_budget_s",
                  "0 with sync.mode = \"streaming\" (a budget would break its schedule)")})
        if (!s) return s;
    }
    if (!(d.eval_split == "validation" || d.eval_split == "test"))
      return {errc::invalid_argument,
              "dipaco.eval_split: '" + d.eval_split + "' is not one of validation, test"};
    if (!(d.outer == "nesterov" || d.outer == "co2"))
      return {errc::invalid_argument,
              "dipaco.outer: '" + d.outer + "' is not one of nesterov, co2"};
    if (auto clip = paco::outer::parse_co2_clip(d.outer_clip); !clip)
      return {errc::invalid_argument,
              "dipaco.outer_clip: '" + d.outer_clip + "' is not one of none, element, norm"};
    for (const auto& s : {range(std::isfinite(d.outer_gap_penalty) && d.outer_gap_penalty > 0,
                                "dipaco.outer_gap_penalty", "a finite number > 0"),
                          range(std::isfinite(d.outer_clip_threshold) && d.outer_clip_threshold > 0,
                                "dipaco.outer_clip_threshold", "a finite number > 0"),
                          range(d.outer == "co2" || d.outer_gap_penalty == 1.0f,
                                "dipaco.outer_gap_penalty", "1 unless dipaco.outer = \"co2\""),
                          range(d.outer == "co2" || d.outer_clip == "none", "dipaco.outer_clip",
                                "\"none\" unless dipaco.outer = \"co2\"")})
      if (!s) return s;
    if (c.sync.mode != "blocking" && t.device == "cuda")
      return {errc::invalid_argument,
              "sync.mode = \"" + c.sync.mode +
                  "\": the overlapped rules through the store run on host workers; with "
                  "train.device = \"cuda\" use \"blocking\""};
    if (auto th = parse_throttle(c.launch.throttle, paths * d.workers_per_path); !th)
      return th.error();
    auto comp = paco::store::parse_compression(d.compress, std::size_t(d.lgreco_every));
    if (!comp) return {errc::invalid_argument, "dipaco." + comp.error().message};
    if (auto s = paco::store::check_store_compression(*comp); !s)
      return {errc::invalid_argument, "dipaco." + s.error().message};
    // Device workers encode on the device: fp32, or int8 / int4 / int2 without L-GreCo.
    const auto& sp = comp->spec;
    const bool device_codec = sp.kind == paco::compress::codec_kind::identity ||
                              (sp.kind == paco::compress::codec_kind::quantize && !sp.lgreco &&
                               (sp.bits == 8 || sp.bits == 4 || sp.bits == 2));
    if (t.device == "cuda" && !device_codec)
      return {errc::invalid_argument,
              "dipaco.compress = \"" + d.compress +
                  "\" has no device kernels; with train.device = \"cuda\" use \"fp32\", "
                  "\"int8\", \"int4\" or \"int2\""};
  }
  paco::optim::adamw o{
      .lr = t.lr, .beta1 = t.beta1, .beta2 = t.beta2, .weight_decay = t.weight_decay};
  return o.validate();
}

// Parses TOML text or a file into a table (toml++ as built by Debian reports errors by throwing).
inline result<toml::table> parse_toml(const std::string& text_or_path, bool is_file) {
  try {
    return is_file ? toml::parse_file(text_or_path) : toml::parse(text_or_path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << e.description() << " at line " << e.source().begin.line;
    return error(errc::invalid_argument, os.str());
  }
}

// Reads TOML `text` (from `origin`, for errors: "config 'job.toml'"; empty text: none), then
// applies overrides "section.key=value" (TOML values).
inline result<train_config> load_config_text(const std::string& origin, const std::string& text,
                                             const std::vector<std::string>& overrides) {
  train_config c;
  auto f = fields(c);
  auto apply = [&](const toml::table& tbl, const std::string& where) -> paco::status {
    for (auto& [sec, node] : tbl) {
      const std::string s(sec.str());
      auto* sub = node.as_table();
      if (!sub) return {errc::invalid_argument, where + ": '" + s + "' must be a [section]"};
      for (auto& [key, val] : *sub) {
        const std::string k = s + "." + std::string(key.str());
        auto it = f.find(k);
        if (it == f.end()) {
          std::vector<std::string> names;
          for (auto& [name, field] : f) names.push_back(name);
          const auto near = paco::closest_name(k, names);
          return {errc::invalid_argument, where + ": unknown setting '" + k + "'" +
                                              (near ? " (did you mean '" + *near + "'?)" : "")};
        }
        if (auto st = it->second.set(val); !st)
          return {errc::invalid_argument, where + ": " + st.error().message};
      }
    }
    return {};
  };
  if (!text.empty()) {
    auto r = parse_toml(text, false);
    if (!r) return error(errc::invalid_argument, origin + ": " + r.error().message);
    if (auto s = apply(*r, origin); !s) return s.error();
  }
  for (auto& o : overrides) {
    auto eq = o.find('=');
    auto dot = o.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      return error(errc::invalid_argument, "--set '" + o + "' must look like section.key=value");
    const std::string sec = o.substr(0, dot), key = o.substr(dot + 1, eq - dot - 1);
    std::string val = o.substr(eq + 1);
    auto r = parse_toml("[" + sec + "]\n" + key + " = " + val, false);
    if (!r) {  // bare strings are allowed: retry quoted
      r = parse_toml("[" + sec + "]\n" + key + " = \"" + val + "\"", false);
      if (!r) return error(errc::invalid_argument, "--set '" + o + "': cannot parse the value");
    }
    if (auto s = apply(*r, "--set"); !s) return s.error();
  }
  if (auto s = validate(c); !s) return s.error();
  return c;
}

// The text of config file `path` (empty path: ""). Errors: not_found, io, naming it.
inline result<std::string> read_config_text(const std::filesystem::path& path) {
  if (path.empty()) return std::string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return error(errc::not_found, "config file '" + path.string() + "' does not exist");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  if (!in && !in.eof()) return error(errc::io, "config file '" + path.string() + "': cannot read");
  return os.str();
}

// Reads `path` (if non-empty), then applies overrides "section.key=value" (TOML values).
inline result<train_config> load_config(const std::filesystem::path& path,
                                        const std::vector<std::string>& overrides) {
  auto text = read_config_text(path);
  if (!text) return text.error();
  return load_config_text("config '" + path.string() + "'", *text, overrides);
}

}  // namespace paco_train
