#pragma once
// paco_train's DiPaCo job (job.mode = "dipaco") as a unit of its own, dipaco_main.cpp: the job
// layer's roles instantiated for the GPT are half of paco_train's compile time, and two units
// build on two cores side by side.

#include "paco/job/command_line.hpp"
#include "paco/job/gpt_settings.hpp"

namespace paco_train {

// What the command line asked of a DiPaCo job: the library's role flags, and what only
// paco_train has.
struct dipaco_request {
  paco::job::command_line roles;  // -c, --set, --role, --worker, --export, --score, …
  bool export_hf = false;
  // The configuration was read back from the run's own record (nothing to record again);
  // otherwise -c and every --set are recorded by a new run.
  bool from_run_dir = false;
};

// Runs the requested role of cfg's DiPaCo job (job::run_role); returns the process's exit code
// (job/dipaco_job.hpp). Requires: cfg.job.mode == "dipaco".
int run_dipaco(const paco::job::gpt_settings& cfg, const dipaco_request& r);

}  // namespace paco_train
