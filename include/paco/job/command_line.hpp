#pragma once
// command_line: the flags of a program's job, its roles (job/main.hpp run_role runs them) and
// its configuration (-c FILE, --set section.key=value: job/settings_file.hpp), declared once on a
// CLI11 app. job::run_main parses them; a program with flags of its own (paco_train) adds these
// to its app and fills the same struct. No role is included here.
//
//   CLI::App app{"my_job: …"};
//   job::command_line c;
//   job::add_flags(app, c);
//   CLI11_PARSE(app, argc, argv);

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace paco::job {

// The job's flags.
struct command_line {
  std::string role = "launcher";  // launcher, prepare, store, worker (a program may add roles)
  int worker = 0, stage = 0;
  std::string run_dir, export_dir, peers;
  std::vector<std::string> score;  // --score (repeatable)
  bool resume = false, fresh = false;
  bool results = false;  // --results
  // The configuration: a TOML file and "section.key=value" items, applied in that order over the
  // program's own values (job/settings_file.hpp apply).
  std::string config_path;
  std::vector<std::string> overrides;

  // Whether the configuration is given on this command line (else: the program's values, or
  // the run directory's record for --export, --score and --results).
  bool configured() const { return !config_path.empty() || !overrides.empty(); }
  // Whether this command line reads a finished run rather than running a role.
  bool reads_run() const { return !export_dir.empty() || !score.empty() || results; }
};

// Adds the job's flags to app, each filling its field of c. roles: the values --role accepts.
// Requires: c outlives app's parsing.
inline void add_flags(CLI::App& app, command_line& c,
                      std::vector<std::string> roles = {"launcher", "prepare", "store", "worker"}) {
  app.add_option("--config,-c", c.config_path, "TOML file of settings ([section] key = value)");
  app.add_option("--set", c.overrides,
                 "override a setting: section.key=value, a TOML value (repeatable; applied after "
                 "the file, in order)");
  app.add_flag("--resume", c.resume,
               "continue from the checkpoints in the run directory (every checkpoint is "
               "verified; a missing, damaged, swapped or foreign one is an error)");
  app.add_flag("--fresh", c.fresh,
               "delete a previous run in the run directory and start over (with --role store or "
               "worker: that process's state only)");
  app.add_option("--role", c.role,
                 "this process: launcher (default: starts, or prints, every other), prepare "
                 "(the run directory's base model and routing), store, worker")
      ->check(CLI::IsMember(std::move(roles)));
  app.add_option("--worker", c.worker, "--role worker: this worker's id (1 … workers)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--stage", c.stage,
                 "--role worker with dipaco.stages > 1: this stage of the worker's path "
                 "(0 … stages − 1)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--peers", c.peers,
                 "with --stage: every stage's host:port of this worker's path, comma-separated");
  app.add_option("--run-dir", c.run_dir, "the run directory (default: output.dir)");
  app.add_option("--export", c.export_dir,
                 "write every path of a finished run, the base model, the router and a model "
                 "card to DIR, then exit");
  app.add_option("--score", c.score,
                 "route each text file with a finished run's router and score it with the path "
                 "it picks (bits/byte), then exit");
  app.add_flag("--results", c.results,
               "print the results table of a finished run, however it was launched (local, "
               "manual, mpi), then exit");
}

}  // namespace paco::job
