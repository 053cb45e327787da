// paco_train: trains paco's byte-level GPT on the Brown corpus from a TOML config
// (job/gpt_settings.hpp): one model (job.mode = "lm", job/lm_job.hpp), a DiPaCo / DiLoCo grid
// of paths over a module store and workers (job.mode = "dipaco", job/main.hpp's roles), or one
// model cut into pipeline stages (job.mode = "pipeline", job/pipeline_job.hpp).
//
//   paco_train --config examples/configs/lm_brown.toml [--set train.steps=300] [--resume]
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "dipaco_job.hpp"
#include "dipaco_main.hpp"
#include "paco/job/lm_job.hpp"
#include "paco/job/pipeline_job.hpp"

namespace fs = std::filesystem;
using namespace paco;

namespace {

int bad_input(const std::string& message) {
  std::fprintf(stderr, "paco_train: %s\n", message.c_str());
  return job::exit_bad_input;
}

// --export, --score or --results of a run named by its directory alone: the configuration the
// run kept (job_config.json).
result<job::gpt_settings> settings_of_run(const std::string& dir) {
  const fs::path rec = job::run_dir{dir}.config_record();
  auto text = job::read_config_text(rec);
  if (!text)
    return error(text.error().code, text.error().message +
                                        " (a run keeps its configuration there; without it, "
                                        "give the run's -c and --set again)");
  auto src = job::config_source::of_record(*text, "'" + rec.string() + "'");
  if (!src) return src.error();
  return job::load_gpt_settings(*src);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::signal(SIGPIPE, SIG_IGN);  // a peer that died must be an error code, not a dead process
  CLI::App app{"paco_train: train paco's byte-level GPT on the Brown corpus"};
  // The job layer's flags (job/command_line.hpp: -c, --set, roles, --export, --score, …), with
  // the pipeline job's stage role, and paco_train's own.
  paco_train::dipaco_request req;
  auto& c = req.roles;
  job::add_flags(app, c, {"launcher", "prepare", "store", "worker", "stage"});
  long from_step = -1;
  app.add_option("--from-step", from_step,
                 "pipeline jobs, --role stage: resume from this stage's checkpoint of that step "
                 "(the launcher passes it; every stage resumes from the same step)");
  app.add_flag("--export-hf", req.export_hf,
               "with --export: also write each model in Hugging Face's GPT-2 layout, "
               "DIR/hf/<name>/ (config.json + model.safetensors, GPT2LMHeadModel's names)");
  app.footer(
      "Settings (in the -c file as [section] key = value, or --set section.key=value), with "
      "their defaults:\n" +
      job::gpt_settings_listing());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // help printed, or the flag's error (bad input)
  }
  const std::string& role = c.role;

  // A run named by its directory alone reads the configuration it kept; one rank of an engine's
  // launch (mpirun, srun: launch.mode = "mpi") reads it on rank 0 only, the other ranks receive
  // it (job::launch_gpt_settings).
  req.from_run_dir = !c.configured() && !c.run_dir.empty() && c.reads_run();
  const auto cfg_r = req.from_run_dir
                         ? settings_of_run(c.run_dir)
                         : job::launch_gpt_settings(c.config_path, c.overrides,
                                                    role == "launcher" && !c.reads_run());
  if (!cfg_r) return bad_input(cfg_r.error().what());
  const auto& cfg = *cfg_r;
  // A device run on a build or machine without one fails here, before any data or process.
  if (cfg.train.device == "cuda" && c.export_dir.empty())
    if (auto s = paco_train::device_available(); !s) return bad_input(s.error().what());
  if (cfg.job.mode == "dipaco") return paco_train::run_dipaco(cfg, req);
  if (from_step >= 0 && role != "stage")
    return bad_input("--from-step is for --role stage (the launcher's --resume finds the step)");
  try {
    const auto j = paco_train::make_job(
        cfg, job::config_source{c.config_path, {}, c.overrides}.args(), req.export_hf);
    if (cfg.job.mode == "pipeline") {
      if (!c.export_dir.empty())
        return bad_input(
            "--export is not offered by pipeline jobs (stage 0 scores the gathered "
            "model)");
      if (role == "stage") return job::run_pipeline_stage(j, c.stage, c.peers, from_step);
      if (role == "launcher") return job::run_pipeline_launcher(j, c.resume, c.fresh);
      return bad_input("--role " + role + " is not a pipeline role");
    }
    if (role != "launcher") return bad_input("--role is for job.mode = \"dipaco\" or \"pipeline\"");
    if (!c.export_dir.empty()) return job::export_lm(j, c.export_dir);
    return job::run_lm(j, c.resume);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paco_train (%s): %s\n", role.c_str(), e.what());
    return job::exit_bad_input;
  }
}
