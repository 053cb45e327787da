// The GPT job's settings (job/gpt_settings.hpp, paco_train's configuration): a value is refused,
// naming its key, when it does not fit its field's type (an integer too large is never narrowed;
// nan, ±inf and floats beyond float's range never pass), and then when it is outside the field's
// own range.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "paco/job/gpt_settings.hpp"

using paco::job::load_gpt_settings;
using paco::job::parse_throttle;

namespace {

// The error of loading the defaults with `overrides`; "(loaded)" when it loads, which no
// expected message contains (a REQUIRE here, inside the caller's REQUIRE, would crash Catch).
std::string gpt_refusal(const std::vector<std::string>& overrides) {
  auto c = load_gpt_settings({}, overrides);
  if (c) return "(loaded)";
  return c.error().code == paco::errc::invalid_argument ? c.error().message
                                                        : "(not invalid_argument)";
}

bool mentions(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("load_gpt_settings: a good config still loads", "[job][config]") {
  auto defaults = load_gpt_settings({}, {});
  REQUIRE(defaults);
  auto dipaco = load_gpt_settings(
      {}, {"job.mode=dipaco", "dipaco.rounds=4", "train.lr=3e-3", "launch.round_timeout_s=1e6",
           "launch.peer_timeout_s=0.5", "dipaco.outer_lr=1", "train.batch=4096"});
  REQUIRE(dipaco);
  REQUIRE(dipaco->dipaco.rounds == 4);
  REQUIRE(dipaco->train.lr == 3e-3f);
  REQUIRE(dipaco->launch.round_timeout_s == 1e6);
  REQUIRE(dipaco->train.batch == 4096);
  const std::string configs = std::string(PACO_SOURCE_DIR) + "/examples/configs/";
  for (const char* f : {"lm_brown.toml", "dipaco_brown.toml", "dipaco_brown_int8.toml"}) {
    INFO(f);
    REQUIRE(load_gpt_settings(configs + f, {}));
  }
}

TEST_CASE("load_gpt_settings: a mistyped key names the closest setting", "[job][config]") {
  auto typo = load_gpt_settings({}, {"trian.steps=10"});
  REQUIRE(!typo);
  CHECK(typo.error().message ==
        "--set: unknown setting 'trian.steps' (did you mean 'train.steps'?)");
  auto unknown = load_gpt_settings({}, {"model.colour=1"});
  REQUIRE(!unknown);
  CHECK(unknown.error().message == "--set: unknown setting 'model.colour'");
}

TEST_CASE("load_gpt_settings: integers are range-checked, never narrowed", "[job][config]") {
  // 4294967299 = 2^32 + 3 used to run 3 rounds.
  const auto rounds = gpt_refusal({"job.mode=dipaco", "dipaco.rounds=4294967299"});
  REQUIRE(mentions(rounds, "dipaco.rounds must be an integer in [-2147483648, 2147483647]"));
  REQUIRE(mentions(rounds, "got 4294967299"));
  REQUIRE(
      mentions(gpt_refusal({"dipaco.rounds=-4294967295"}), "dipaco.rounds must be an integer in"));
  // In the type's range but not the field's: validate() names the field's own range.
  REQUIRE(
      mentions(gpt_refusal({"job.mode=dipaco", "dipaco.rounds=-1"}), "dipaco.rounds must be ≥ 1"));
  REQUIRE(mentions(gpt_refusal({"train.batch=4294967297"}), "train.batch must be an integer in"));
  // Beyond 64 bits TOML cannot read the number; the field is still named, with its range.
  const auto batch = gpt_refusal({"train.batch=99999999999999999999"});
  REQUIRE(mentions(batch, "train.batch must be an integer in [-2147483648, 2147483647]"));
  REQUIRE(mentions(batch, "got '99999999999999999999'"));
  REQUIRE(
      mentions(gpt_refusal({"train.steps=99999999999999999999"}),
               "train.steps must be an integer in [-9223372036854775808, 9223372036854775807]"));
  REQUIRE(mentions(gpt_refusal({"train.batch=2.5"}), "train.batch must be an integer in"));
  REQUIRE(
      mentions(gpt_refusal({"dipaco.grid=[4294967298, 2]"}), "dipaco.grid must be an array of"));
}

TEST_CASE("load_gpt_settings: nan, inf and huge floating values are refused", "[job][config]") {
  // round_timeout_s = inf used to pass "> 0" (then 173 empty rounds).
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "launch.round_timeout_s=inf"}),
                   "launch.round_timeout_s must be a finite number, got inf"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "launch.round_timeout_s=nan"}),
                   "launch.round_timeout_s must be a finite number"));
  // 1e400 is not a TOML float: it arrives as the string '1e400'.
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "launch.round_timeout_s=1e400"}),
                   "launch.round_timeout_s must be a finite number, got '1e400'"));
  REQUIRE(mentions(gpt_refusal({"train.lr=nan"}), "train.lr must be a finite number"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "dipaco.outer_lr=inf"}),
                   "dipaco.outer_lr must be a finite number"));
  REQUIRE(
      mentions(gpt_refusal({"train.grad_clip=-inf"}), "train.grad_clip must be a finite number"));
  // A float field: beyond float's range is refused rather than made inf.
  REQUIRE(mentions(gpt_refusal({"train.weight_decay=1e39"}),
                   "train.weight_decay must be a finite number in [-3.40282e+38, 3.40282e+38]"));
  // Every time, rate and learning-rate field refuses nan and ±inf by name.
  for (const char* key :
       {"model.init_std", "train.budget_s", "train.lr", "train.min_lr", "train.weight_decay",
        "train.beta1", "train.beta2", "train.grad_clip", "dipaco.outer_lr", "dipaco.outer_momentum",
        "launch.round_timeout_s", "launch.peer_timeout_s"})
    for (const char* v : {"nan", "inf", "-inf", "+nan"}) {
      INFO(key << "=" << v);
      REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", std::string(key) + "=" + v}),
                       "--set: " + std::string(key) + " must be a finite number"));
    }
}

TEST_CASE("validate: each field's own range, upper bounds included", "[job][config]") {
  // Timeouts become milliseconds in a long: a huge one is refused, not overflowed.
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "launch.round_timeout_s=1e7"}),
                   "launch.round_timeout_s must be in (0, 1e6] (seconds)"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "launch.peer_timeout_s=1e7"}),
                   "launch.peer_timeout_s must be in (0.2, 1e6] (seconds)"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "launch.peer_timeout_s=0.1"}),
                   "launch.peer_timeout_s must be in (0.2, 1e6]"));
  REQUIRE(mentions(gpt_refusal({"train.budget_s=1e10"}), "train.budget_s must be in (0, 1e9]"));
  REQUIRE(mentions(gpt_refusal({"train.beta2=1"}), "train.beta2 must be in [0, 1)"));
  REQUIRE(mentions(gpt_refusal({"train.weight_decay=-0.1"}), "train.weight_decay must be"));
  REQUIRE(
      mentions(gpt_refusal({"job.mode=dipaco", "dipaco.outer_lr=0"}), "dipaco.outer_lr must be"));
  // The model's fields are named as the config names them.
  REQUIRE(mentions(gpt_refusal({"model.init_std=2"}), "model.init_std must be in (0, 1)"));
  REQUIRE(mentions(gpt_refusal({"model.heads=3"}), "model.heads must be"));
}

TEST_CASE("load_gpt_settings: the sync section and the throttle are checked by name",
          "[job][config]") {
  // Every rule runs through the store; streaming's τ, α and H are checked
  // against the grid's levels (its fragments).
  for (const char* mode : {"co2", "eager", "naive_delayed", "blocking", "streaming"})
    REQUIRE(
        load_gpt_settings("", {"job.mode=\"dipaco\"", std::string("sync.mode=\"") + mode + "\""}));
  REQUIRE(load_gpt_settings(
      "", {"job.mode=\"dipaco\"", "launch.link_mbps=20", "launch.link_latency_ms=50"}));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "launch.link_mbps=-1"}),
                   "launch.link_mbps must be"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "launch.link_latency_ms=1e9"}),
                   "launch.link_latency_ms must be"));
  REQUIRE(
      load_gpt_settings("", {"job.mode=dipaco", "sync.mode=\"streaming\"", "sync.overlap_steps=49",
                             "sync.alpha=0.5"}));  // H = 100 over 2 levels: τ < 50
  REQUIRE(
      mentions(gpt_refusal({"job.mode=dipaco", "sync.mode=\"streaming\"", "sync.overlap_steps=50"}),
               "sync.overlap_steps must be in [0, dipaco.inner_steps / levels = 50)"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.mode=\"streaming\"", "sync.alpha=1.5"}),
                   "sync.alpha must be in [0, 1]"));
  REQUIRE(
      mentions(gpt_refusal({"job.mode=dipaco", "sync.mode=\"streaming\"", "dipaco.inner_steps=99"}),
               "dipaco.inner_steps must be a multiple of the grid's 2 levels"));
  REQUIRE(load_gpt_settings(
      "", {"job.mode=dipaco", "sync.mode=\"co2_snapshot\"", "sync.overlap_steps=10"}));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.mode=\"co2_snapshot\""}),
                   "sync.overlap_steps must be in [1, dipaco.inner_steps = 100)"));
  REQUIRE(
      mentions(gpt_refusal({"job.mode=dipaco", "sync.mode=\"streaming\"", "sync.train_budget_s=2"}),
               "sync.train_budget_s must be 0 with sync.mode = \"streaming\""));
  REQUIRE(load_gpt_settings("", {"job.mode=dipaco", "dipaco.eval_split=\"test\""}));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "dipaco.eval_split=\"train\""}),
                   "dipaco.eval_split: 'train' is not one of validation, test"));
  // The store's outer optimizer.
  REQUIRE(load_gpt_settings("", {"job.mode=dipaco", "dipaco.outer=\"co2\"", "dipaco.outer_lr=1",
                                 "dipaco.outer_momentum=0.2", "dipaco.outer_clip=\"element\"",
                                 "dipaco.outer_gap_penalty=2"}));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "dipaco.outer=\"adam\""}),
                   "dipaco.outer: 'adam' is not one of nesterov, co2"));
  REQUIRE(mentions(
      gpt_refusal({"job.mode=dipaco", "dipaco.outer=\"co2\"", "dipaco.outer_clip=\"max\""}),
      "dipaco.outer_clip: 'max' is not one of none, element, norm"));
  REQUIRE(mentions(
      gpt_refusal({"job.mode=dipaco", "dipaco.outer=\"co2\"", "dipaco.outer_gap_penalty=0"}),
      "dipaco.outer_gap_penalty must be a finite number > 0"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "dipaco.outer_clip=\"element\""}),
                   "dipaco.outer_clip must be \"none\" unless dipaco.outer = \"co2\""));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "dipaco.outer_gap_penalty=2"}),
                   "dipaco.outer_gap_penalty must be 1 unless dipaco.outer = \"co2\""));
  // Every rule, a train budget and a throttle run on device workers too (the config is
  // checked; the device itself only when a worker starts).
  for (const char* mode : {"co2", "eager", "naive_delayed", "streaming"})
    REQUIRE(load_gpt_settings("", {"job.mode=dipaco", "train.device=\"cuda\"",
                                   std::string("sync.mode=\"") + mode + "\""}));
  REQUIRE(load_gpt_settings("", {"job.mode=dipaco", "train.device=\"cuda\"",
                                 "sync.train_budget_s=2", "launch.throttle=\"1:2\""}));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.mode=\"fast\""}),
                   "is not one of blocking, streaming, co2, co2_snapshot, eager, naive_delayed"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.mode=\"delayed\""}), "'naive_delayed'"));
  REQUIRE(load_gpt_settings("", {"job.mode=\"dipaco\"", "sync.train_budget_s=2.5"}));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.train_budget_s=-1"}),
                   "sync.train_budget_s must be in [0, launch.round_timeout_s)"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.train_budget_s=120"}),
                   "sync.train_budget_s must be in [0, launch.round_timeout_s)"));
  // Pace: from a budget (the default), measured from the store's push pace, or none.
  REQUIRE(load_gpt_settings("", {"job.mode=dipaco", "sync.pace=\"measured\""}));
  REQUIRE(load_gpt_settings(
      "", {"job.mode=dipaco", "sync.pace=\"measured\"", "sync.quorum=1", "sync.max_staleness=2"}));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.pace=\"fast\""}),
                   "sync.pace must be \"budget\", \"measured\" or \"none\""));
  REQUIRE(
      mentions(gpt_refusal({"job.mode=dipaco", "sync.pace=\"measured\"", "sync.train_budget_s=2"}),
               "sync.train_budget_s must be 0 with sync.pace = \"measured\""));
  REQUIRE(mentions(
      gpt_refusal({"job.mode=dipaco", "sync.pace=\"measured\"", "sync.mode=\"streaming\""}),
      "sync.pace must be \"budget\" or \"none\" with sync.mode = \"streaming\""));
  // Rounds that close on a quorum, late work merged: each setting checked by name.
  REQUIRE(load_gpt_settings(
      "", {"job.mode=dipaco", "sync.quorum=2", "sync.grace=0.25", "sync.max_staleness=2"}));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.quorum=-1"}), "sync.quorum must be in"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.grace=-1"}), "sync.grace must be in"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.max_staleness=65"}),
                   "sync.max_staleness must be in [0, 64]"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "sync.mode=co2", "sync.max_staleness=1"}),
                   "sync.mode must be \"blocking\" with sync.quorum or sync.max_staleness"));
  REQUIRE(load_gpt_settings("", {"job.mode=\"dipaco\"", "launch.throttle=\"4:4,1:1.5\""}));
  for (const char* bad : {"5:2", "0:2", "4:0.5", "4", "4:x", "4:2,4:3", "a:2", "4:inf"})
    REQUIRE(
        mentions(gpt_refusal({"job.mode=dipaco", std::string("launch.throttle=\"") + bad + "\""}),
                 "launch.throttle: '"));
  const auto th = parse_throttle("4:4,1:1.5", 4);
  REQUIRE(th);
  REQUIRE(th->at(4) == 4.0);
  REQUIRE(th->at(1) == 1.5);
  REQUIRE(parse_throttle("", 4)->empty());
}

TEST_CASE("load_gpt_settings: a pipeline's stages, split, schedule, head and queue are checked",
          "[job][config]") {
  const std::string configs = std::string(PACO_SOURCE_DIR) + "/examples/configs/";
  REQUIRE(load_gpt_settings(configs + "pipeline_brown.toml", {}));
  const std::string p = "job.mode=pipeline";
  REQUIRE(load_gpt_settings({}, {p, "train.steps=10", "pipeline.split=[1]"}));
  REQUIRE(mentions(gpt_refusal({p, "train.steps=10", "pipeline.stages=5"}), "pipeline.stages"));
  REQUIRE(mentions(gpt_refusal({p, "train.steps=10", "pipeline.stages=0"}), "pipeline.stages"));
  REQUIRE(mentions(gpt_refusal({p, "train.steps=10", "pipeline.split=[2, 2]", "pipeline.stages=3"}),
                   "pipeline.split"));
  REQUIRE(mentions(gpt_refusal({p, "train.steps=10", "pipeline.split=[1, 3]"}),
                   "pipeline.split: 2 boundaries make 3 stages, pipeline.stages is 2"));
  REQUIRE(mentions(gpt_refusal({p, "train.steps=10", "pipeline.split=[5]"}), "pipeline.split"));
  REQUIRE(mentions(gpt_refusal({p, "train.steps=10", "pipeline.queue_depth=0"}),
                   "pipeline.queue_depth"));
  REQUIRE(mentions(gpt_refusal({p, "train.steps=10", "pipeline.head=deep"}),
                   "pipeline.head: 'deep' is not a head"));
  REQUIRE(
      mentions(gpt_refusal({p, "train.steps=10", "pipeline.schedule=zb"}), "pipeline.schedule"));
  REQUIRE(mentions(
      gpt_refusal({p, "train.steps=10", "pipeline.schedule=gpipe", "pipeline.micro_batches=3"}),
      "pipeline.micro_batches: 3 does not divide the batch"));
  REQUIRE(
      mentions(gpt_refusal({p, "train.steps=10", "model.tie_weights=true"}), "model.tie_weights"));
  REQUIRE(mentions(gpt_refusal({p}), "train.steps"));
  REQUIRE(mentions(gpt_refusal({p, "train.steps=10", "pipeline.hosts=[\"a\"]"}), "pipeline.hosts"));
  REQUIRE(
      mentions(gpt_refusal({p, "train.steps=10", "pipeline.link_mbps=-1"}), "pipeline.link_mbps"));
  REQUIRE(mentions(gpt_refusal({p, "train.steps=10", "pipeline.activations=fp8"}),
                   "pipeline.activations: 'fp8' is not an activation format"));
  REQUIRE(load_gpt_settings({}, {p, "train.steps=10", "pipeline.activations=int8"}));
}

TEST_CASE("load_gpt_settings: a DiPaCo job's paths cut into stages are checked",
          "[config][pipeline]") {
  // The default grid [2, 2] over 4 blocks: 2 levels, so 1 or 2 stages.
  const std::string d = "job.mode=dipaco";
  REQUIRE(load_gpt_settings({}, {d, "dipaco.stages=2"}));
  REQUIRE(load_gpt_settings({}, {d, "dipaco.stages=2", "dipaco.stage_split=[1]"}));
  REQUIRE(load_gpt_settings(
      {}, {d, "dipaco.stages=2", "pipeline.schedule=gpipe", "pipeline.micro_batches=4"}));
  REQUIRE(mentions(gpt_refusal({d, "dipaco.stages=3"}),
                   "dipaco.stages: a path of 2 levels is cut into 1..2"));
  REQUIRE(mentions(gpt_refusal({d, "dipaco.stages=0"}), "dipaco.stages"));
  REQUIRE(
      mentions(gpt_refusal({d, "dipaco.stage_split=[1]"}), "dipaco.stage_split: set only with"));
  REQUIRE(mentions(gpt_refusal({d, "dipaco.stages=2", "dipaco.stage_split=[2]"}),
                   "dipaco.stage_split"));
  REQUIRE(mentions(gpt_refusal({d, "dipaco.stages=2", "dipaco.grid=[2, 2, 2]", "model.layers=4",
                                "dipaco.stage_split=[1, 2]"}),
                   "dipaco.stage_split: 2 cuts for 2 stages"));
  REQUIRE(mentions(gpt_refusal({d, "dipaco.stages=2", "sync.mode=co2"}),
                   "sync.mode: \"co2\" is not supported"));
  REQUIRE(mentions(gpt_refusal({d, "dipaco.stages=2", "pipeline.queue_depth=0"}),
                   "pipeline.queue_depth"));
  REQUIRE(mentions(gpt_refusal({d, "dipaco.stages=2", "pipeline.head=deep"}), "pipeline.head"));
  REQUIRE(mentions(gpt_refusal({d, "dipaco.stages=2", "sync.train_budget_s=1"}),
                   "sync.train_budget_s"));
  REQUIRE(mentions(gpt_refusal({d, "dipaco.stages=2", "sync.pace=\"measured\""}),
                   "sync.pace: must not be \"measured\" with dipaco.stages > 1"));
}

TEST_CASE("load_gpt_settings: train.optimizer names Muon's settings and where it runs",
          "[job][config]") {
  auto muon =
      load_gpt_settings({}, {"job.mode=dipaco", "train.optimizer=muon", "train.muon_lr=0.03"});
  REQUIRE(muon);
  REQUIRE(muon->train.optimizer == "muon");
  REQUIRE(muon->train.muon_lr == 0.03f);
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "train.optimizer=lion"}),
                   "train.optimizer must be \"adamw\" or \"muon\""));
  REQUIRE(mentions(gpt_refusal({"train.optimizer=muon"}), "unless job.mode = \"dipaco\""));
  REQUIRE(
      mentions(gpt_refusal({"job.mode=dipaco", "train.optimizer=muon", "train.device=cuda"}),
               "train.optimizer must be \"adamw\" unless job.mode = \"dipaco\" on train.device"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "train.optimizer=muon", "dipaco.stages=2"}),
                   "train.optimizer: \"muon\" is not supported with dipaco.stages > 1"));
  REQUIRE(mentions(gpt_refusal({"job.mode=dipaco", "train.optimizer=muon", "train.muon_lr=0"}),
                   "train.muon_lr must be in (0, 10)"));
  REQUIRE(
      mentions(gpt_refusal({"job.mode=dipaco", "train.optimizer=muon", "train.muon_momentum=1"}),
               "train.muon_momentum must be in [0, 1)"));
}
