// The job layer without processes: settings read from TOML and --set items (every key checked
// by name, every value by its field's type), a configuration's record, the checks of a job
// against a model of one's own, a program's job configured over its own values, and what a
// process's log says it sent.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "paco/job/configure.hpp"
#include "paco/job/log_traffic.hpp"
#include "paco/job/settings_file.hpp"
#include "paco/job/validate.hpp"
#include "paco/nn/gpt.hpp"

using namespace paco;
namespace fs = std::filesystem;

namespace {

using model_t = nn::block_lm<nn::transformer_block>;

// A model of one's own: 3 blocks of width 32, context 64 (not a gpt_config: the checks read the
// model itself).
model_t three_blocks(bool tie = false, int vocab = 256) {
  return model_t({.vocab = vocab, .ctx = 64, .d = 32, .tie_weights = tie},
                 nn::make_block(32, 2, 4 * 32, 0.02f, 0.02f), 3);
}

// The message of applying src over default settings, or "(applied)".
std::string refusal(const job::config_source& src) {
  job::settings s;
  job::setting_fields f;
  job::add_settings(f, s);
  auto st = job::apply(f, src);
  if (st) return "(applied)";
  return st.error().code == errc::invalid_argument ? st.error().message : "(not invalid_argument)";
}

std::string refusal(const job::settings& s, const model_t& m) {
  if (auto st = job::validate_training(s); !st) return st.error().message;
  auto st = job::validate_dipaco(s, m);
  return st ? "(valid)" : st.error().message;
}

}  // namespace

TEST_CASE("settings_file: the file, then each --set in order, onto the fields", "[job][settings]") {
  job::settings s;
  job::setting_fields f;
  job::add_settings(f, s);
  const job::config_source src{
      "job.toml",
      "[dipaco]\nrounds = 3\ngrid = [1, 4]\n[launch]\nmode = \"manual\"\ntls = true\n",
      {"dipaco.rounds=5", "sync.mode=eager", "pipeline.hosts=[\"a\", \"b\"]", "train.lr=3e-3"}};
  REQUIRE(job::apply(f, src));
  CHECK(s.dipaco.rounds == 5);  // --set after the file
  CHECK(s.dipaco.grid == std::vector<int>{1, 4});
  CHECK(s.launch.mode == "manual");
  CHECK(s.launch.tls);
  CHECK(s.sync.mode == "eager");  // a bare word is a string
  CHECK(s.pipeline.hosts == std::vector<std::string>{"a", "b"});
  CHECK(s.train.lr == 3e-3f);
  // --help's listing: every key with its value, as TOML writes it.
  const auto listing = f.listing();
  CHECK(listing.find("  dipaco.rounds = 5\n") != std::string::npos);
  CHECK(listing.find("  dipaco.grid = [1, 4]\n") != std::string::npos);
  CHECK(listing.find("  launch.mode = \"manual\"\n") != std::string::npos);
  CHECK(listing.find("  launch.tls = true\n") != std::string::npos);
  CHECK(f.names().size() == 85);  // every field of job::settings
}

TEST_CASE("settings_file: unknown keys and values that do not fit their field are named",
          "[job][settings]") {
  CHECK(refusal({"", "", {"dipaco.rouns=3"}}) ==
        "--set: unknown setting 'dipaco.rouns' (did you mean 'dipaco.rounds'?)");
  CHECK(refusal({"a.toml", "[model]\ncolour = 1\n", {}}) ==
        "config 'a.toml': unknown setting 'model.colour'");
  CHECK(refusal({"a.toml", "rounds = 3\n", {}}) == "config 'a.toml': 'rounds' must be a [section]");
  CHECK(refusal({"a.toml", "[dipaco\n", {}}).rfind("config 'a.toml': ", 0) == 0);
  // 2^32 + 3 is never narrowed to 3.
  CHECK(refusal({"", "", {"dipaco.rounds=4294967299"}}) ==
        "--set: dipaco.rounds must be an integer in [-2147483648, 2147483647], got 4294967299");
  CHECK(refusal({"", "", {"train.lr=nan"}}) == "--set: train.lr must be a finite number, got nan");
  CHECK(refusal({"", "", {"train.lr=1e39"}}).find("(a float), got 1e+39") != std::string::npos);
  CHECK(refusal({"", "", {"train.lr=fast"}}) ==
        "--set: train.lr must be a finite number, got 'fast'");
  CHECK(refusal({"", "", {"dipaco.grid=[2, x]"}}) ==
        "--set: dipaco.grid must be an array of integers, e.g. [2, 2]");
  // Exact types: 1 is no bool, 3.5 and 3.0 no integer (an integer is a fine float).
  CHECK(refusal({"", "", {"launch.tls=1"}}) == "--set: launch.tls must be true or false, got 1");
  CHECK(refusal({"", "", {"dipaco.rounds=3.5"}}) ==
        "--set: dipaco.rounds must be an integer in [-2147483648, 2147483647], got 3.5");
  CHECK(refusal({"a.toml", "[dipaco]\nrounds = 3.0\n", {}}).find("must be an integer") !=
        std::string::npos);
  CHECK(refusal({"", "", {"dipaco.outer_lr=1"}}) == "(applied)");
  CHECK(refusal({"", "", {"launch.mode=3"}}) == "--set: launch.mode must be a string, got 3");
  CHECK(refusal({"", "", {"rounds=3"}}) == "--set 'rounds=3' must look like section.key=value");
}

TEST_CASE("config_source: recorded, read back, and given to child processes", "[job][settings]") {
  const job::config_source src{"run.toml", "[dipaco]\nrounds = 2\n", {"train.seed=3", "a.b=c d"}};
  auto back = job::config_source::of_record(src.record(), "job_config.json");
  REQUIRE(back);
  CHECK(back->path == src.path);
  CHECK(back->text == src.text);
  CHECK(back->set == src.set);
  CHECK(src.args() == std::vector<std::string>{"--config", "run.toml", "--set", "train.seed=3",
                                               "--set", "a.b=c d"});
  CHECK(job::config_source{}.args().empty());
  for (const char* bad : {"", "{}", "[1]", R"({"config":"a","text":"","set":[1]})"}) {
    INFO(bad);
    auto r = job::config_source::of_record(bad, "job_config.json");
    REQUIRE(!r);
    CHECK(r.error().code == errc::protocol);
    CHECK(r.error().message.rfind("job_config.json", 0) == 0);
  }
  CHECK(job::config_source::says_mpi("launch.mode=mpi"));
  CHECK(job::config_source::says_mpi(" launch.mode = \"mpi\" "));
  CHECK(!job::config_source::says_mpi("launch.mode=local"));
  CHECK(!job::config_source::says_mpi("launch.modes=mpi"));
  auto missing = job::config_source::read("/nonexistent/job.toml", {});
  REQUIRE(!missing);
  CHECK(missing.error().code == errc::not_found);
}

TEST_CASE("validate_dipaco: a job is checked against its own model", "[job][settings]") {
  const auto m = three_blocks();
  job::settings s;
  s.dipaco.grid = {1, 3, 1};
  CHECK(refusal(s, m) == "(valid)");
  s.dipaco.grid = {1, 2, 2, 1};
  CHECK(refusal(s, m) ==
        "dipaco.grid must be at most model.layers levels (the model has 3 blocks)");
  s.dipaco.grid = {1, 3, 1};
  s.dipaco.prefix = 65;  // the model's context is 64
  CHECK(refusal(s, m) == "dipaco.prefix must be in [1, model.ctx] (the model's ctx is 64)");
  s.dipaco.prefix = 32;
  CHECK(refusal(s, three_blocks(true)) ==
        "model.tie_weights must be false when the grid has several levels");
  CHECK(refusal(s, three_blocks(false, 300)) ==
        "model.vocab must be 256 (the byte tokenizer), the model's is 300");
  // A path of 3 levels is cut into at most 3 stages.
  s.dipaco.stages = 4;
  CHECK(refusal(s, m).rfind("dipaco.stages: a path of 3 levels is cut into 1..3", 0) == 0);
  s.dipaco.stages = 3;
  CHECK(refusal(s, m) == "(valid)");
  s.sync.mode = "co2";
  CHECK(refusal(s, m).rfind("sync.mode: \"co2\" is not supported with dipaco.stages > 1", 0) == 0);
  s.dipaco.stages = 1;
  CHECK(refusal(s, m) == "(valid)");
  s.sync.mode = "fast";
  CHECK(refusal(s, m).rfind("sync.mode: ", 0) == 0);
  s.sync.mode = "blocking";
  s.train.lr = 2;
  CHECK(refusal(s, m) == "train.lr must be in (0, 1)");
}

TEST_CASE("validate_pipeline: stages cut the model's own blocks", "[job][settings]") {
  const auto m = three_blocks();
  job::settings s;
  s.train.steps = 10;
  s.pipeline.stages = 3;
  CHECK(job::validate_pipeline(s, m));
  s.pipeline.stages = 4;  // 3 blocks
  CHECK(!job::validate_pipeline(s, m));
  s.pipeline.stages = 2;
  s.pipeline.split = {1, 2};
  CHECK(job::validate_pipeline(s, m).error().message ==
        "pipeline.split: 2 boundaries make 3 stages, pipeline.stages is 2 (give stages − 1 "
        "boundaries)");
  s.pipeline.split = {};
  s.train.optimizer = "muon";
  CHECK(job::validate_pipeline(s, m).error().message.rfind("train.optimizer", 0) == 0);
  s.train.optimizer = "adamw";
  CHECK(
      job::validate_pipeline(s, three_blocks(true)).error().message.rfind("model.tie_weights", 0) ==
      0);
}

TEST_CASE("configure: the program's values, then the file, then --set; children get the same",
          "[job][settings]") {
  job::dipaco_job<model_t> program{{}, three_blocks()};
  program.dipaco.grid = {1, 3, 1};
  program.dipaco.rounds = 4;
  program.train.batch = 8;
  program.child_args = {"--program-flag"};
  CHECK(job::settings_listing(program).find("  dipaco.rounds = 4\n") != std::string::npos);
  const job::config_source src{
      "job.toml", "[dipaco]\nrounds = 3\ninner_steps = 7\n", {"dipaco.rounds=2"}};
  auto j = job::configure(program, src);
  REQUIRE(j);
  CHECK(j->dipaco.rounds == 2);
  CHECK(j->dipaco.inner_steps == 7);
  CHECK(j->train.batch == 8);  // the program's value stays where nothing overrides it
  CHECK(j->dipaco.grid == std::vector<int>{1, 3, 1});
  CHECK(j->child_args == std::vector<std::string>{"--config", "job.toml", "--set",
                                                  "dipaco.rounds=2", "--program-flag"});
  CHECK(j->config_record == src.record());
  // A configuration the model cannot run is refused with the setting named.
  auto bad = job::configure(program, {"", "", {"dipaco.grid=[1, 1, 1, 1]"}});
  REQUIRE(!bad);
  CHECK(bad.error().message.rfind("dipaco.grid must be at most model.layers levels", 0) == 0);
  auto typo = job::configure(program, {"", "", {"dipaco.rouns=2"}});
  REQUIRE(!typo);
  CHECK(typo.error().message ==
        "--set: unknown setting 'dipaco.rouns' (did you mean 'dipaco.rounds'?)");
}

TEST_CASE("traffic_of_log: every life's bytes and the rounds they cover", "[job][log]") {
  const fs::path dir =
      fs::temp_directory_path() / ("paco_log_traffic_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto of = [&](const std::string& text) {
    std::ofstream(dir / "worker-1.jsonl") << text;
    return job::traffic_of_log(dir / "worker-1.jsonl");
  };
  const auto rec = [](long round, long bytes) {
    return "{\"round\":" + std::to_string(round) + ",\"bytes_sent\":" + std::to_string(bytes) +
           ",\"loss\":1.0}\n";
  };
  // One life, rounds 0 … 3 (a count since the first start).
  auto one = of(rec(0, 10) + rec(1, 20) + rec(2, 30) + rec(3, 40));
  CHECK(one.bytes == 40);
  CHECK(one.rounds == 4);
  CHECK(one.lives == 1);
  // Resumed from a checkpoint written after round 1 whose record was never logged: the count
  // goes on, and the rounds its bytes cover include the unlogged one.
  auto resumed = of(rec(0, 10) + rec(2, 30) + rec(3, 40));
  CHECK(resumed.bytes == 40);
  CHECK(resumed.rounds == 4);
  // Joined from nothing at round 2 after the first life's rounds 0 and 1: a new count from 0.
  auto joined = of(rec(0, 10) + rec(1, 20) + rec(2, 10) + rec(3, 20));
  CHECK(joined.bytes == 40);
  CHECK(joined.rounds == 4);
  CHECK(joined.lives == 2);
  // A log lost with its machine: only the new life's rounds 5 … 7.
  auto wiped = of(rec(5, 10) + rec(6, 20) + rec(7, 30));
  CHECK(wiped.bytes == 30);
  CHECK(wiped.rounds == 3);
  // Lines that are no round record are skipped; no file: nothing.
  auto noisy =
      of("\n{\"round\":0}\nnot json\n" + rec(0, 10) + "{\"round\":\"1\",\"bytes_sent\":5}\n");
  CHECK(noisy.bytes == 10);
  CHECK(noisy.rounds == 1);
  fs::remove_all(dir);
  auto none = job::traffic_of_log(dir / "worker-1.jsonl");
  CHECK(none.lives == 0);
  CHECK(none.bytes == 0);
  CHECK(none.rounds == 0);
}
