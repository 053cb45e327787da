#pragma once
// validate: a job's settings checked against each field's own range, and against the model
// they train, before any data, file or process is touched. paco_train's checks and
// job::run_main's are these.
//
//   validate_training   train and data sections (every job)
//   validate_dipaco     a DiPaCo / DiLoCo job of `model`: grid, rounds, outer optimizer, sync
//                       rule, codec, launch, and the stages of its paths (dipaco.stages > 1)
//   validate_pipeline   a pipeline job of `model` (job/pipeline_job.hpp)
//
// Ensures of each: ok() iff every field the job reads is in its accepted range; otherwise
// invalid_argument whose message starts with the field ("section.key") and gives the range.
// Every comparison is false for nan, so a nan set in code is refused too.

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "paco/core/error.hpp"
#include "paco/job/settings.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/outer/co2.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/pipeline/path_stages.hpp"
#include "paco/pipeline/stage_plan.hpp"
#include "paco/pipeline/stage_runner.hpp"
#include "paco/store/compression.hpp"
#include "paco/train/sync.hpp"

namespace paco::job {

namespace detail {

inline status bad_setting(const std::string& m) {
  return {errc::invalid_argument, m};
}

// ok, or "<key> must be <range>".
inline status in_range(bool ok, const char* key, const std::string& range) {
  return ok ? status{} : bad_setting(std::string(key) + " must be " + range);
}

// The model's own checks: bytes in and out, the job's tokenizer.
template <nn::BlockModel M>
status check_model(const M& model) {
  if (model.vocab() != 256)
    return bad_setting("model.vocab must be 256 (the byte tokenizer), the model's is " +
                       std::to_string(model.vocab()));
  return {};
}

}  // namespace detail

// The train and data sections.
inline status validate_training(const settings& c) {
  using detail::in_range;
  const auto& t = c.train;
  for (auto s :
       {in_range(t.batch >= 1 && t.batch <= 4096, "train.batch", "in [1, 4096]"),
        in_range(t.steps >= 0, "train.steps", ">= 0 (0: fit the budget)"),
        in_range(t.budget_s > 0 && t.budget_s <= 1e9, "train.budget_s", "in (0, 1e9] (seconds)"),
        in_range(t.lr > 0 && t.lr < 1, "train.lr", "in (0, 1)"),
        in_range(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr", "in [0, train.lr]"),
        in_range(t.warmup >= 0, "train.warmup", ">= 0"),
        in_range(std::isfinite(t.weight_decay) && t.weight_decay >= 0, "train.weight_decay",
                 "a finite number >= 0"),
        in_range(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "in [0, 1)"),
        in_range(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "in [0, 1)"),
        in_range(std::isfinite(t.grad_clip) && t.grad_clip >= 0, "train.grad_clip",
                 "a finite number >= 0 (0: off)"),
        in_range(t.optimizer == "adamw" || t.optimizer == "muon", "train.optimizer",
                 "\"adamw\" or \"muon\""),
        in_range(std::isfinite(t.muon_lr) && t.muon_lr > 0 && t.muon_lr < 10, "train.muon_lr",
                 "in (0, 10)"),
        in_range(t.muon_momentum >= 0 && t.muon_momentum < 1, "train.muon_momentum", "in [0, 1)"),
        in_range(t.threads >= 1 && t.threads <= 256, "train.threads", "in [1, 256]"),
        in_range(t.device == "cpu" || t.device == "cuda", "train.device", "\"cpu\" or \"cuda\""),
        in_range(t.gemm == "bf16" || t.gemm == "tf32" || t.gemm == "fp32", "train.gemm",
                 "\"bf16\", \"tf32\" or \"fp32\""),
        in_range(t.eval_every >= 1, "train.eval_every", ">= 1"),
        in_range(t.eval_batches >= 1, "train.eval_batches", ">= 1"),
        in_range(t.checkpoint_every >= 1, "train.checkpoint_every", ">= 1"),
        in_range(c.data.corpus == "brown" || c.data.corpus == "files", "data.corpus",
                 "\"brown\" or \"files\""),
        in_range(c.data.dir.empty() || c.data.path.empty(), "data.dir",
                 "unset when data.path is set (it is the older name of data.path)"),
        in_range(c.data.corpus != "files" || !data_path(c.data).empty(), "data.path",
                 "a directory of text files or a JSONL file when data.corpus = \"files\""),
        in_range(!c.data.text_field.empty(), "data.text_field", "a JSONL field name")})
    if (!s) return s;
  const optim::adamw o{
      .lr = t.lr, .beta1 = t.beta1, .beta2 = t.beta2, .weight_decay = t.weight_decay};
  return o.validate();
}

// How stages train and talk ([pipeline]: schedule, head, activation format, queue,
// micro-batches, links, timeout), for a pipeline job and for a DiPaCo job whose paths are cut
// into stages: through the pipeline's own parsers and pipeline_options::validate.
inline status validate_stage_training(const settings& c) {
  namespace pl = pipeline;
  using detail::bad_setting;
  const auto& p = c.pipeline;
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
    return bad_setting(s.error().message + " (train.batch is " + std::to_string(c.train.batch) +
                       ")");
  if (!(p.link_mbps >= 0 && p.link_mbps <= 1e6))
    return bad_setting(
        "pipeline.link_mbps: must be in [0, 1e6] (megabits per second; 0: unlimited)");
  if (!(p.link_latency_ms >= 0 && p.link_latency_ms <= 60000))
    return bad_setting("pipeline.link_latency_ms: must be in [0, 60000] (milliseconds)");
  if (!(p.timeout_s > 0 && p.timeout_s <= 1e6))
    return bad_setting("pipeline.timeout_s: must be in (0, 1e6] (seconds)");
  return {};
}

// A pipeline job of `model`: its stages, split, schedule, head and queue through the pipeline's
// own checks, then the job's ranges. The train section is validate_training's.
template <nn::BlockModel M>
status validate_pipeline(const settings& c, const M& model) {
  namespace pl = pipeline;
  using detail::bad_setting;
  if (auto s = detail::check_model(model); !s) return s;
  const auto& p = c.pipeline;
  auto plan = p.split.empty() ? pl::stage_plan::equal(model.blocks(), p.stages)
                              : pl::stage_plan::at(p.split, model.blocks());
  if (!plan) return plan.error();
  if (plan->stages() != p.stages)
    return bad_setting("pipeline.split: " + std::to_string(p.split.size()) + " boundaries make " +
                       std::to_string(plan->stages()) + " stages, pipeline.stages is " +
                       std::to_string(p.stages) + " (give stages − 1 boundaries)");
  if (p.stages > 64) return bad_setting("pipeline.stages: must be in [1, 64]");
  if (auto s = validate_stage_training(c); !s) return s;
  if (model.shape().tie_weights)
    return bad_setting(
        "model.tie_weights: must be false in a pipeline (the last stage's head would share "
        "the first stage's embedding)");
  if (c.train.optimizer != "adamw")
    return bad_setting("train.optimizer must be \"adamw\" in a pipeline (its stages step AdamW)");
  if (c.train.steps < 1)
    return bad_setting(
        "train.steps: a pipeline trains a fixed number of steps (>= 1); a time budget "
        "(train.steps = 0) is for the lm job");
  if (c.train.device != "cpu")
    return bad_setting("train.device: a pipeline's stages run on \"cpu\"");
  if (!p.hosts.empty() && int(p.hosts.size()) != p.stages)
    return bad_setting("pipeline.hosts: " + std::to_string(p.hosts.size()) + " hosts for " +
                       std::to_string(p.stages) + " stages (one each, or none for loopback)");
  if (p.base_port < 0 || p.base_port + p.stages > 65535)
    return bad_setting("pipeline.base_port: must be in [0, 65535 − stages]");
  if (!(c.launch.peer_timeout_s > 0.2 && c.launch.peer_timeout_s <= 1e6))
    return bad_setting("launch.peer_timeout_s must be in (0.2, 1e6] (seconds)");
  if (p.eval_tokens < 0)
    return bad_setting("pipeline.eval_tokens: must be >= 0 (0: the whole splits)");
  if (!(c.launch.mode == "local" || c.launch.mode == "manual"))
    return bad_setting("launch.mode must be \"local\" or \"manual\"");
  return {};
}

// A DiPaCo job whose paths are cut into stages (dipaco.stages > 1): the cut through the
// pipeline's own check (pipeline::path_stages, its field names given as dipaco.*), the stages'
// training settings ([pipeline]) through pipeline_options, then what the stages cannot do.
template <nn::BlockModel M>
status validate_dipaco_stages(const settings& c, const M& model) {
  namespace pl = pipeline;
  using detail::bad_setting;
  const auto& d = c.dipaco;
  const auto& p = c.pipeline;
  if (d.stages < 1) return bad_setting("dipaco.stages: must be >= 1 (1: a process per worker)");
  if (d.stages > 1 && c.train.optimizer != "adamw")
    return bad_setting("train.optimizer: \"" + c.train.optimizer +
                       "\" is not supported with dipaco.stages > 1 (the stages of a path step "
                       "AdamW)");
  if (d.stages == 1) {
    if (!d.stage_split.empty())
      return bad_setting("dipaco.stage_split: set only with dipaco.stages > 1");
    return {};
  }
  auto levels = path::split_gpt_levels(model.layout(), model.blocks(), int(d.grid.size()));
  if (!levels) return bad_setting("dipaco.grid: " + levels.error().message);
  if (auto ps = pl::path_stages::make(model, *levels, d.stages, d.stage_split); !ps) {
    std::string m = ps.error().message;
    for (auto [from, to] : {std::pair<std::string, std::string>{"pipeline.stages", "dipaco.stages"},
                            {"pipeline.split", "dipaco.stage_split"}})
      if (m.rfind(from, 0) == 0) m = to + m.substr(from.size());
    return bad_setting(m);
  }
  if (auto s = validate_stage_training(c); !s) return s;
  if (c.train.device != "cpu")
    return bad_setting("train.device: the stages of a path run on \"cpu\"");
  if (c.sync.mode != "blocking")
    return bad_setting("sync.mode: \"" + c.sync.mode +
                       "\" is not supported with dipaco.stages > 1 (the stages of a path sync "
                       "blocking rounds)");
  if (c.sync.train_budget_s != 0)
    return bad_setting(
        "sync.train_budget_s: must be 0 with dipaco.stages > 1 (a budget would cut the "
        "stages of a path at different steps)");
  if (c.sync.pace == "measured")
    return bad_setting(
        "sync.pace: must not be \"measured\" with dipaco.stages > 1 (a budget would cut the "
        "stages of a path at different steps)");
  long workers = d.workers_per_path;
  for (int e : d.grid) workers *= e;
  if (p.base_port < 0 || p.base_port + workers * d.stages > 65535)
    return bad_setting("pipeline.base_port: must be in [0, 65535 − workers × dipaco.stages]");
  if (!p.hosts.empty() && int(p.hosts.size()) != d.stages)
    return bad_setting("pipeline.hosts: " + std::to_string(p.hosts.size()) + " hosts for " +
                       std::to_string(d.stages) +
                       " stages (the host of each stage of every worker, or none for loopback)");
  return {};
}

// A DiPaCo / DiLoCo job of `model` (job/dipaco_job.hpp): the dipaco, sync and launch sections,
// and the stages of its paths. The train section is validate_training's.
template <nn::BlockModel M>
status validate_dipaco(const settings& c, const M& model) {
  using detail::bad_setting;
  using detail::in_range;
  if (auto s = detail::check_model(model); !s) return s;
  const auto& d = c.dipaco;
  const auto& t = c.train;
  const auto& l = c.launch;
  long paths = 1;
  for (int k : d.grid) paths *= k;
  for (auto s :
       {in_range(d.grid.size() >= 1 && d.grid.size() <= path::path_plan::max_levels, "dipaco.grid",
                 "1 to 8 levels, e.g. [2, 2]"),
        in_range(std::all_of(d.grid.begin(), d.grid.end(), [](int k) { return k >= 1 && k <= 64; }),
                 "dipaco.grid", "experts in [1, 64] per level"),
        in_range(int(d.grid.size()) <= model.blocks(), "dipaco.grid",
                 "at most model.layers levels (the model has " + std::to_string(model.blocks()) +
                     " blocks)"),
        in_range(d.workers_per_path >= 1 && paths * d.workers_per_path <= 64,
                 "dipaco.workers_per_path", "≥ 1 with at most 64 workers in all"),
        in_range(d.rounds >= 1, "dipaco.rounds", "≥ 1"),
        in_range(d.inner_steps >= 1, "dipaco.inner_steps", "≥ 1"),
        in_range(d.pretrain_steps >= 0, "dipaco.pretrain_steps", "≥ 0"),
        in_range(std::isfinite(d.outer_lr) && d.outer_lr > 0, "dipaco.outer_lr",
                 "a finite number > 0"),
        in_range(d.outer_momentum >= 0 && d.outer_momentum < 1, "dipaco.outer_momentum",
                 "in [0, 1)"),
        in_range(d.path_rescale == "none" || d.path_rescale == "sqrt_paths" ||
                     d.path_rescale == "inv_sqrt_paths",
                 "dipaco.path_rescale", "none, sqrt_paths or inv_sqrt_paths"),
        in_range(
            d.prefix >= 1 && d.prefix <= model.shape().ctx, "dipaco.prefix",
            "in [1, model.ctx] (the model's ctx is " + std::to_string(model.shape().ctx) + ")"),
        in_range(d.reroute_every >= 0 && d.reroute_every <= model.shape().ctx,
                 "dipaco.reroute_every", "in [0, model.ctx] (0: off)"),
        in_range(!model.shape().tie_weights || d.grid.size() == 1, "model.tie_weights",
                 "false when the grid has several levels"),
        in_range(t.optimizer == "adamw" || t.device == "cpu", "train.optimizer",
                 "\"adamw\" with train.device = \"cuda\" (Muon runs in the DiPaCo and DiLoCo "
                 "workers on the host)"),
        in_range(l.mode == "local" || l.mode == "manual" || l.mode == "mpi", "launch.mode",
                 "\"local\", \"manual\" or \"mpi\""),
        in_range(l.base_port >= 0 && l.base_port < 65000, "launch.base_port", "in [0, 65000)"),
        // Both become milliseconds in a long: bounded well inside it.
        in_range(l.round_timeout_s > 0 && l.round_timeout_s <= 1e6, "launch.round_timeout_s",
                 "in (0, 1e6] (seconds)"),
        in_range(l.peer_timeout_s > 0.2 && l.peer_timeout_s <= 1e6, "launch.peer_timeout_s",
                 "in (0.2, 1e6] (seconds)"),
        in_range(l.restarts >= 0, "launch.restarts", "≥ 0"),
        in_range(l.link_mbps >= 0 && l.link_mbps <= 1e6, "launch.link_mbps",
                 "in [0, 1e6] (megabits per second; 0: unlimited)"),
        in_range(l.link_latency_ms >= 0 && l.link_latency_ms <= 60000, "launch.link_latency_ms",
                 "in [0, 60000] (milliseconds)"),
        in_range(l.link_streams >= 1 && l.link_streams <= 16, "launch.link_streams",
                 "in [1, 16] (TCP streams per link)"),
        in_range(!l.tls || l.link_streams == 1, "launch.link_streams",
                 "1 when launch.tls = true (TLS links have one stream)"),
        in_range(l.link_bdp_bytes >= 0 && l.link_bdp_bytes <= 17179869184.0,
                 "launch.link_bdp_bytes", "in [0, 16 GiB] (bandwidth x round trip; 0: unknown)"),
        in_range(l.metrics_port >= 0 && l.metrics_port < 65000, "launch.metrics_port",
                 "in [0, 65000) (0: off)"),
        in_range(!l.tls || !l.tls_ca.empty(), "launch.tls_ca",
                 "a CA certificate file when launch.tls = true"),
        in_range(d.lgreco_every >= 1 && d.lgreco_every <= 1000000, "dipaco.lgreco_every",
                 "in [1, 1000000] (rounds)"),
        in_range(c.sync.train_budget_s >= 0 && c.sync.train_budget_s < l.round_timeout_s,
                 "sync.train_budget_s", "in [0, launch.round_timeout_s) (seconds; 0: off)")})
    if (!s) return s;
  auto rule = train::parse_sync(c.sync.mode);
  if (!rule) return bad_setting("sync.mode: " + rule.error().message);
  for (const auto& s :
       {in_range(c.sync.quorum >= 0 && c.sync.quorum <= 1000000, "sync.quorum",
                 "in [0, 1000000] (workers; 0: every worker)"),
        in_range(std::isfinite(c.sync.grace) && c.sync.grace >= 0 && c.sync.grace <= 1000,
                 "sync.grace", "in [0, 1000] (× the median push spread)"),
        in_range(c.sync.max_staleness >= 0 && c.sync.max_staleness <= 64, "sync.max_staleness",
                 "in [0, 64] (rounds; 0: late pushes dropped)"),
        in_range(c.sync.pace == "budget" || c.sync.pace == "measured" || c.sync.pace == "none",
                 "sync.pace", "\"budget\", \"measured\" or \"none\""),
        in_range(c.sync.pace == "budget" || c.sync.train_budget_s == 0, "sync.train_budget_s",
                 "0 with sync.pace = \"" + c.sync.pace + "\" (a budget is sync.pace = \"budget\")"),
        in_range(c.sync.pace != "measured" || !rule->get_if<train::streaming>(), "sync.pace",
                 "\"budget\" or \"none\" with sync.mode = \"streaming\" (its staggered syncs "
                 "keep every worker on one schedule)"),
        in_range((c.sync.quorum == 0 && c.sync.max_staleness == 0) || c.sync.mode == "blocking",
                 "sync.mode",
                 "\"blocking\" with sync.quorum or sync.max_staleness (a late push "
                 "merged into a later round would break an overlapped rule's "
                 "landing, which counts the worker's own Δ in the mean it fetches)")})
    if (!s) return s;
  if (auto s = validate_dipaco_stages(c, model); !s) return s;
  if (rule->get_if<train::streaming>()) {
    const int levels = int(d.grid.size());
    if (d.inner_steps % levels != 0)
      return bad_setting("dipaco.inner_steps must be a multiple of the grid's " +
                         std::to_string(levels) +
                         " levels with sync.mode = \"streaming\" (the levels' modules are its "
                         "fragments, one synced every H / levels steps)");
    for (const auto& s :
         {in_range(c.sync.overlap_steps >= 0 && c.sync.overlap_steps < d.inner_steps / levels,
                   "sync.overlap_steps",
                   "in [0, dipaco.inner_steps / levels = " +
                       std::to_string(d.inner_steps / levels) + ") with sync.mode = \"streaming\""),
          in_range(c.sync.alpha >= 0 && c.sync.alpha <= 1, "sync.alpha", "in [0, 1]"),
          in_range(c.sync.train_budget_s == 0, "sync.train_budget_s",
                   "0 with sync.mode = \"streaming\" (a budget would break its schedule)")})
      if (!s) return s;
  }
  if (rule->get_if<train::co2_snapshot>())
    if (auto s = in_range(c.sync.overlap_steps >= 1 && c.sync.overlap_steps < d.inner_steps,
                          "sync.overlap_steps",
                          "in [1, dipaco.inner_steps = " + std::to_string(d.inner_steps) +
                              ") with sync.mode = \"co2_snapshot\" (the steps its snapshot's "
                              "write-back drops)");
        !s)
      return s;
  if (!(d.eval_split == "validation" || d.eval_split == "test"))
    return bad_setting("dipaco.eval_split: '" + d.eval_split + "' is not one of validation, test");
  if (!(d.outer == "nesterov" || d.outer == "co2"))
    return bad_setting("dipaco.outer: '" + d.outer + "' is not one of nesterov, co2");
  if (auto clip = outer::parse_co2_clip(d.outer_clip); !clip)
    return bad_setting("dipaco.outer_clip: '" + d.outer_clip +
                       "' is not one of none, element, norm");
  for (const auto& s :
       {in_range(std::isfinite(d.outer_gap_penalty) && d.outer_gap_penalty > 0,
                 "dipaco.outer_gap_penalty", "a finite number > 0"),
        in_range(std::isfinite(d.outer_clip_threshold) && d.outer_clip_threshold > 0,
                 "dipaco.outer_clip_threshold", "a finite number > 0"),
        in_range(d.outer == "co2" || d.outer_gap_penalty == 1.0f, "dipaco.outer_gap_penalty",
                 "1 unless dipaco.outer = \"co2\""),
        in_range(d.outer == "co2" || d.outer_clip == "none", "dipaco.outer_clip",
                 "\"none\" unless dipaco.outer = \"co2\"")})
    if (!s) return s;
  if (auto th = parse_throttle(l.throttle, int(paths * d.workers_per_path)); !th) return th.error();
  auto comp = store::parse_compression(d.compress, std::size_t(d.lgreco_every));
  if (!comp) return bad_setting("dipaco." + comp.error().message);
  if (auto s = store::check_store_compression(*comp); !s)
    return bad_setting("dipaco." + s.error().message);
  // Device workers encode on the device: fp32, or int8 / int4 / int2 without L-GreCo.
  const auto& sp = comp->spec;
  const bool device_codec = sp.kind == compress::codec_kind::identity ||
                            (sp.kind == compress::codec_kind::quantize && !sp.lgreco &&
                             (sp.bits == 8 || sp.bits == 4 || sp.bits == 2));
  if (t.device == "cuda" && !device_codec)
    return bad_setting("dipaco.compress = \"" + d.compress +
                       "\" has no device kernels; with train.device = \"cuda\" use \"fp32\", "
                       "\"int8\", \"int4\" or \"int2\"");
  return {};
}

}  // namespace paco::job
