#pragma once
// configure: a program's DiPaCo job as its command line's configuration makes it: the program's
// own values (the job it built in code), then a config_source (-c FILE and every --set:
// job/settings_file.hpp), checked for its model (job/validate.hpp). job::run_main's; a program
// with its own main() calls it the same way.
//
//   auto src = job::config_source::read("job.toml", {"dipaco.rounds=4"}).value_or_throw();
//   auto configured = job::configure(my_job, src).value_or_throw();
//   std::puts(job::settings_listing(my_job).c_str());   // every key with the program's value

#include <string>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/settings_file.hpp"
#include "paco/job/validate.hpp"
#include "paco/nn/concepts.hpp"

namespace paco::job {

// The job as a command line configures it: the program's values (job's settings), then the
// config file and each --set of src (job/settings_file.hpp apply), checked for this model
// (job/validate.hpp). Its child processes get the same source (its arguments before the
// program's own child_args), and a new run records it (unless the program records its own).
// Errors: invalid_argument naming the setting.
template <nn::BlockModel Model>
result<dipaco_job<Model>> configure(const dipaco_job<Model>& job, const config_source& src) {
  dipaco_job<Model> j = job;
  setting_fields f;
  add_settings(f, j);
  if (auto s = apply(f, src); !s) return s.error();
  if (auto s = validate_training(j); !s) return s.error();
  if (auto s = validate_dipaco(j, j.model); !s) return s.error();
  auto args = src.args();
  args.insert(args.end(), job.child_args.begin(), job.child_args.end());
  j.child_args = std::move(args);
  if (j.config_record.empty()) j.config_record = src.record();
  return j;
}

// Every setting of job with its value, a line each ("  dipaco.rounds = 4"): a program's --help.
template <nn::BlockModel Model>
std::string settings_listing(const dipaco_job<Model>& job) {
  return listing_of(setting_values(job));
}

}  // namespace paco::job
