#pragma once
// A program's command line for its DiPaCo job: run_main(job, argc, argv) is the whole main() of
// a program that trains its own model as store + worker processes (examples/three_levels_job).
//
//   prog                          the launcher: launch.mode "local" starts the store and every
//                                 worker on this machine, "manual" prints one command each,
//                                 "mpi": this process is one rank of mpirun / srun's (ranks.hpp)
//   prog --role prepare           write the run directory's base model and routing
//   prog --role store             the store (on launch.store_host)
//   prog --role worker --worker N worker N (1 … workers); with dipaco.stages > 1 also
//        --stage K --peers H:P,…    stage K of its path, the worker's stages' endpoints
//   prog --export DIR             every path of a finished run, the base model, the router and
//                                 a model card (job/export.hpp)
//   prog --score FILE …           route and score text files with the run (job/score.hpp)
//   prog --results                the results table of a finished run, however it was launched
//                                 (job/results.hpp run_results)
// with, for any of them: --run-dir DIR (default output.dir), --resume, --fresh, and the
// configuration over the program's own values: -c FILE (TOML, [section] key = value) and
// --set section.key=value (job/settings_file.hpp), checked before anything runs
// (job/validate.hpp); --help lists every flag and setting. The launcher starts this same program
// (/proc/self/exe) with the same -c and --set, job.child_args and a role, so a process of any
// role has the same job. PACO_TOKEN authenticates every link (the launcher draws one).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "paco/io/timestamped_lines.hpp"
#include "paco/job/command_line.hpp"
#include "paco/job/configure.hpp"
#include "paco/job/data.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/engine_meeting.hpp"
#include "paco/job/export.hpp"
#include "paco/job/launcher.hpp"
#include "paco/job/prepare.hpp"
#include "paco/job/ranks.hpp"
#include "paco/job/results.hpp"
#include "paco/job/score.hpp"
#include "paco/job/stage_role.hpp"
#include "paco/job/store_role.hpp"
#include "paco/job/worker_role.hpp"

namespace paco::job {

// The job's role named by a command line (parse_command_line's, or a program's own parser's).
// Returns the process's exit code: 0 done, 2 bad input (a message on stderr names it), the
// roles' codes otherwise (job/dipaco_job.hpp). Requires: job's settings are valid (the ranges
// beside each field).
template <nn::BlockModel Model>
int run_role(const dipaco_job<Model>& job, const command_line& c) {
  const char* P = job.program.c_str();
  // A store's or worker's lines going to a log file (the launcher's children, a process started
  // by hand with its output redirected) carry the time they were written.
  if ((c.role == "store" || c.role == "worker" || c.role == "prepare") && !isatty(fileno(stdout))) {
    io::timestamp_lines(stdout);
    io::timestamp_lines(stderr);
  }
  const run_dir rd{c.run_dir.empty() ? fs::path(job.output.dir) : fs::path(c.run_dir)};
  try {
    if (!c.export_dir.empty()) {
      if (auto s = export_paths(job, rd, c.export_dir); !s)
        return std::fprintf(stderr, "%s: export: %s\n", P, s.error().what().c_str()),
               exit_bad_input;
      return 0;
    }
    if (!c.score.empty()) return run_score(job, rd, c.score);
    if (c.results) return run_results(job, rd);
    if (c.role == "store") return run_store(job, rd, c.resume, c.fresh);
    if (c.role == "worker" && job.dipaco.stages > 1)
      return run_stage_worker(job, rd, c.worker, c.stage, c.peers, c.resume, c.fresh);
    if (c.role == "worker") return run_worker(job, rd, c.worker, c.resume, c.fresh);
    if (c.role == "prepare") {
      auto data = load_job_data(job);
      if (!data) return std::fprintf(stderr, "%s: %s\n", P, data.error().what().c_str()), 2;
      if (auto s = prepare(job, rd, *data, make_plan(job)); !s)
        return std::fprintf(stderr, "%s: %s\n", P, s.error().what().c_str()), exit_bad_input;
      std::printf("%s: prepared %s\n", P, rd.dir.c_str());
      return 0;
    }
    if (job.launch.mode == "mpi") return run_ranks(job, rd, c.resume, c.fresh);
    return run_launcher(job, rd, c.resume, c.fresh);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s (%s): %s\n", P, c.role.c_str(), e.what());
    return exit_bad_input;
  }
}

// The whole main() of a program's DiPaCo job: its command line parsed (job/command_line.hpp;
// --help lists every setting with the program's value), the job configured by -c and --set (or,
// to read a finished run with --export, --score or --results and no -c or --set, by the
// configuration the run recorded), then run_role. In an engine's launch (mpirun, srun:
// launch.mode = "mpi") rank 0 reads the configuration and every rank runs what it sent.
template <nn::BlockModel Model>
int run_main(const dipaco_job<Model>& job, int argc, const char* const* argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::signal(SIGPIPE, SIG_IGN);  // a peer that died must be an error code, not a dead process
  const char* P = job.program.c_str();
  CLI::App app{job.program + ": a DiPaCo job of store and worker processes (paco's job layer)"};
  command_line c;
  add_flags(app, c);
  app.footer(
      "Settings (in the -c file as [section] key = value, or --set section.key=value), with "
      "this program's values:\n" +
      settings_listing(job));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : exit_bad_input;
  }
  const auto fail = [&](const error& e) {
    std::fprintf(stderr, "%s: %s\n", P, e.what().c_str());
    return exit_bad_input;
  };
  const run_dir rd{c.run_dir.empty() ? fs::path(job.output.dir) : fs::path(c.run_dir)};
  const auto parse = [&](const std::string& record, const std::string& origin) {
    auto src = config_source::of_record(record, origin);
    if (!src) return result<dipaco_job<Model>>(src.error());
    return configure(job, *src);
  };
  result<dipaco_job<Model>> configured = error(errc::invalid_argument, "not configured");
  if (c.reads_run() && !c.configured() && fs::exists(rd.config_record())) {
    auto text = read_config_text(rd.config_record());
    if (!text) return fail(text.error());
    configured = parse(*text, "'" + rd.config_record().string() + "'");
  } else if (c.role == "launcher" && !c.reads_run()) {
    configured = launch_configuration<dipaco_job<Model>>(
        [&]() -> result<std::string> {
          auto src = config_source::read(c.config_path, c.overrides);
          if (!src) return src.error();
          return src->record();
        },
        [&](const std::string& record) { return parse(record, "rank 0's message"); },
        [](const dipaco_job<Model>& j) -> result<bool> { return j.launch.mode == "mpi"; },
        job.launch.mode == "mpi" ||
            std::any_of(c.overrides.begin(), c.overrides.end(), config_source::says_mpi),
        meeting_epoch_configuration);
  } else {
    auto src = config_source::read(c.config_path, c.overrides);
    configured = src ? configure(job, *src) : result<dipaco_job<Model>>(src.error());
  }
  if (!configured) return fail(configured.error());
  return run_role(*configured, c);
}

}  // namespace paco::job
