#pragma once
// gpt_settings: the settings of a job on paco's byte-level GPT (nn::gpt) — the job's sections
// (job/settings.hpp), the model's and which job runs (job.mode) — read from a TOML file and
// "section.key=value" overrides by the library's reader (job/settings_file.hpp: unknown keys and
// values that do not fit their field are errors naming the key) and checked for the job it runs
// (job/validate.hpp). paco_train's configuration.
//
//   auto s = job::load_gpt_settings("examples/configs/dipaco_brown.toml", {"dipaco.rounds=4"});
//   if (!s) fail(s.error());                    // names the key and its range
//   s->job.mode;                                // "lm", "dipaco" or "pipeline"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/job/engine_meeting.hpp"
#include "paco/job/settings.hpp"
#include "paco/job/settings_file.hpp"
#include "paco/job/validate.hpp"
#include "paco/nn/gpt.hpp"

namespace paco::job {

struct job_section {
  std::string mode = "lm";  // "lm": one model (job/lm_job.hpp); "dipaco": a grid of paths, store
                            // + workers; "pipeline": one model cut into stages, a process each
};

struct gpt_settings : settings {
  nn::gpt_config model{.vocab = 256, .ctx = 256, .d = 256, .layers = 4, .heads = 4};
  job_section job;
};

// Every key of a GPT job: the job's sections (add_settings), the model's and job.mode.
// Requires: f does not outlive c.
inline void add_gpt_settings(setting_fields& f, gpt_settings& c) {
  add_settings(f, c);
  f.add("model.vocab", c.model.vocab);
  f.add("model.ctx", c.model.ctx);
  f.add("model.d", c.model.d);
  f.add("model.layers", c.model.layers);
  f.add("model.heads", c.model.heads);
  f.add("model.mlp_mult", c.model.mlp_mult);
  f.add("model.tie_weights", c.model.tie_weights);
  f.add("model.init_std", c.model.init_std);
  f.add("job.mode", c.job.mode);
}

// Ensures: ok() iff every field the job reads is in its accepted range; the error names the
// field ("section.key") and the range: the model's, then the checks of the job it runs
// (validate_training, validate_dipaco, validate_pipeline).
inline status validate_gpt(const gpt_settings& c) {
  if (auto s = c.model.validate(); !s) {  // gpt_config names its fields "gpt_config.x"
    const std::string prefix = "gpt_config.";
    std::string m = s.error().message;
    if (m.rfind(prefix, 0) == 0) m = "model." + m.substr(prefix.size());
    return error(s.error().code, m);
  }
  if (c.model.vocab != 256)
    return detail::bad_setting("model.vocab must be 256 (the byte tokenizer)");
  if (auto s = validate_training(c); !s) return s;
  if (!(c.job.mode == "lm" || c.job.mode == "dipaco" || c.job.mode == "pipeline"))
    return detail::bad_setting("job.mode must be \"lm\", \"dipaco\" or \"pipeline\"");
  if (!(c.train.optimizer == "adamw" || (c.job.mode == "dipaco" && c.train.device == "cpu")))
    return detail::bad_setting(
        "train.optimizer must be \"adamw\" unless job.mode = \"dipaco\" on train.device = "
        "\"cpu\" (Muon runs in the DiPaCo and DiLoCo workers on the host)");
  if (c.job.mode == "pipeline") return validate_pipeline(c, nn::gpt(c.model));
  if (c.job.mode == "dipaco") return validate_dipaco(c, nn::gpt(c.model));
  return {};
}

// The settings a source gives (the defaults, then its file, then each --set), validated.
// Errors: invalid_argument naming the key (apply's, validate_gpt's).
inline result<gpt_settings> load_gpt_settings(const config_source& src) {
  gpt_settings c;
  setting_fields f;
  add_gpt_settings(f, c);
  if (auto s = apply(f, src); !s) return s.error();
  if (auto s = validate_gpt(c); !s) return s.error();
  return c;
}

// Reads `path` (if non-empty), then applies overrides "section.key=value" (TOML values).
inline result<gpt_settings> load_gpt_settings(const std::filesystem::path& path,
                                              const std::vector<std::string>& overrides) {
  auto src = config_source::read(path, overrides);
  if (!src) return src.error();
  return load_gpt_settings(*src);
}

// This process's settings. In an engine's launch (a rank of a world of two or more in the
// environment: mpirun, srun; launcher: the process would launch the job) they are read once, on
// rank 0, and sent to every rank (launch_configuration): the file's text and the overrides
// (config_source's record), when they say launch.mode = "mpi" (or, when they cannot be read,
// the command line does); the other ranks open no file. Otherwise: read here.
// Errors: load_gpt_settings'; launch_configuration's; launch.mode = "mpi" for a job.mode other
// than "dipaco" (refused on every rank).
inline result<gpt_settings> launch_gpt_settings(const std::string& config_path,
                                                const std::vector<std::string>& overrides,
                                                bool launcher) {
  if (!launcher) return load_gpt_settings(config_path, overrides);
  return launch_configuration<gpt_settings>(
      [&]() -> result<std::string> {
        auto src = config_source::read(config_path, overrides);
        if (!src) return src.error();
        return src->record();
      },
      [](const std::string& shared) -> result<gpt_settings> {
        auto src = config_source::of_record(shared, "rank 0's message");
        if (!src) return src.error();
        return load_gpt_settings(*src);
      },
      [](const gpt_settings& c) -> result<bool> {
        if (c.launch.mode != "mpi") return false;
        if (c.job.mode != "dipaco")
          return error(errc::invalid_argument,
                       "launch.mode = \"mpi\" launches DiPaCo jobs (job.mode = \"dipaco\"), not "
                       "job.mode = \"" +
                           c.job.mode + "\"");
        return true;
      },
      std::any_of(overrides.begin(), overrides.end(), config_source::says_mpi),
      meeting_epoch_configuration);
}

// Every key of a GPT job with its default, a line each: a program's --help.
inline std::string gpt_settings_listing() {
  gpt_settings shown;
  setting_fields f;
  add_gpt_settings(f, shown);
  return f.listing();
}

}  // namespace paco::job
