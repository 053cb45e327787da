#pragma once
// paco_train's configuration: the job's settings (job/settings.hpp) plus the GPT and which job
// runs, read from a TOML file plus "section.key=value" overrides by the library's reader
// (job/settings_file.hpp: unknown keys and values that do not fit their field are errors naming
// the key) and checked by its validation (job/validate.hpp) for the job it runs.

#include <filesystem>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/job/settings.hpp"
#include "paco/job/settings_file.hpp"
#include "paco/job/validate.hpp"
#include "paco/nn/gpt.hpp"

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

// Every key of paco_train's configuration: the job's sections (job::add_settings), the model's
// and job.mode. Requires: f does not outlive c.
inline void add_fields(job::setting_fields& f, train_config& c) {
  job::add_settings(f, c);
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
// field ("section.key") and the range: the model's, then the library's checks of the job it
// runs (job/validate.hpp).
inline paco::status validate(const train_config& c) {
  if (auto s = c.model.validate(); !s) {  // gpt_config names its fields "gpt_config.x"
    const std::string prefix = "gpt_config.";
    std::string m = s.error().message;
    if (m.rfind(prefix, 0) == 0) m = "model." + m.substr(prefix.size());
    return paco::error(s.error().code, m);
  }
  if (c.model.vocab != 256)
    return {errc::invalid_argument, "model.vocab must be 256 (the byte tokenizer)"};
  if (auto s = job::validate_training(c); !s) return s;
  if (!(c.job.mode == "lm" || c.job.mode == "dipaco" || c.job.mode == "pipeline"))
    return {errc::invalid_argument, "job.mode must be \"lm\", \"dipaco\" or \"pipeline\""};
  if (!(c.train.optimizer == "adamw" || (c.job.mode == "dipaco" && c.train.device == "cpu")))
    return {errc::invalid_argument,
            "train.optimizer must be \"adamw\" unless job.mode = \"dipaco\" on train.device = "
            "\"cpu\" (Muon runs in the DiPaCo and DiLoCo workers on the host)"};
  if (c.job.mode == "pipeline") return job::validate_pipeline(c, paco::nn::gpt(c.model));
  if (c.job.mode == "dipaco") return job::validate_dipaco(c, paco::nn::gpt(c.model));
  return {};
}

// The configuration a source gives (the defaults, then its file, then each --set), validated.
// Errors: invalid_argument naming the key (job::apply's, validate's).
inline result<train_config> load_config(const job::config_source& src) {
  train_config c;
  job::setting_fields f;
  add_fields(f, c);
  if (auto s = job::apply(f, src); !s) return s.error();
  if (auto s = validate(c); !s) return s.error();
  return c;
}

// Reads `path` (if non-empty), then applies overrides "section.key=value" (TOML values).
inline result<train_config> load_config(const std::filesystem::path& path,
                                        const std::vector<std::string>& overrides) {
  auto src = job::config_source::read(path, overrides);
  if (!src) return src.error();
  return load_config(*src);
}

}  // namespace paco_train
