// paco_train's DiPaCo job: every role of job.mode = "dipaco" (dipaco_main.hpp).
#include "dipaco_main.hpp"

#include <cstdio>
#include <exception>

#include "dipaco_job.hpp"

namespace paco_train {

int run_dipaco(const train_config& cfg, const dipaco_request& r) {
  const job::run_dir rd{r.run_dir.empty() ? fs::path(cfg.output.dir) : fs::path(r.run_dir)};
  try {
    // A new run keeps its configuration (the file was read before: it can be read again).
    const auto record = r.from_run_dir ? result<std::string>(std::string())
                                       : configuration_record(r.config_path, r.overrides);
    const auto dj = make_job(cfg, config_args(r.config_path, r.overrides), r.export_hf,
                             record ? *record : std::string());
    if (!r.export_dir.empty()) {
      auto s = job::export_paths(dj, rd, r.export_dir);
      if (!s) return std::fprintf(stderr, "paco_train: export: %s\n", s.error().what().c_str()), 2;
      return 0;
    }
    if (!r.score_files.empty()) return job::run_score(dj, rd, r.score_files);
    if (r.role == "store") return job::run_store(dj, rd, r.resume, r.fresh);
    if (r.role == "worker" && cfg.dipaco.stages > 1)
      return job::run_stage_worker(dj, rd, r.worker, r.stage, r.peers, r.resume, r.fresh);
    if (r.role == "worker") return job::run_worker(dj, rd, r.worker, r.resume, r.fresh);
    if (r.role == "prepare") {
      auto data = job::load_job_data(dj);
      if (!data) return std::fprintf(stderr, "paco_train: %s\n", data.error().what().c_str()), 2;
      auto s = job::prepare(dj, rd, *data, job::make_plan(dj));
      if (!s) return std::fprintf(stderr, "paco_train: %s\n", s.error().what().c_str()), 2;
      std::printf("paco_train: prepared %s\n", rd.dir.c_str());
      return 0;
    }
    if (cfg.launch.mode == "mpi") return job::run_ranks(dj, rd, r.resume, r.fresh);
    return job::run_launcher(dj, rd, r.resume, r.fresh);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paco_train (%s): %s\n", r.role.c_str(), e.what());
    return 2;
  }
}

}  // namespace paco_train
