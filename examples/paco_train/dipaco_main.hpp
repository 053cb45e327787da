#pragma once
// paco_train's DiPaCo job (job.mode = "dipaco") as a unit of its own, dipaco_main.cpp: the job
// layer's roles instantiated for the GPT are half of paco_train's compile time, and two units
// build on two cores side by side.

#include <string>
#include <vector>

#include "config.hpp"

namespace paco_train {

// What the command line asked of a DiPaCo job.
struct dipaco_request {
  std::string role = "launcher";  // launcher, prepare, store, worker (job::command_line's)
  std::string run_dir;            // empty: output.dir
  int worker = 0, stage = 0;
  std::string peers;
  bool resume = false, fresh = false;
  std::string export_dir;  // --export DIR
  bool export_hf = false;
  std::vector<std::string> score_files;
  bool results = false;  // --results: the table of a finished run
  // Where the configuration came from: -c and every --set, recorded by a new run; from_run_dir:
  // read back from the run's own record (nothing to record again).
  std::string config_path;
  std::vector<std::string> overrides;
  bool from_run_dir = false;
};

// Runs the requested role of cfg's DiPaCo job; returns the process's exit code
// (job/dipaco_job.hpp). Requires: cfg.job.mode == "dipaco".
int run_dipaco(const train_config& cfg, const dipaco_request& r);

}  // namespace paco_train
