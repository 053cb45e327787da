// paco_train's DiPaCo job: every role of job.mode = "dipaco" (dipaco_main.hpp).
#include "dipaco_main.hpp"

#include <cstdio>
#include <exception>

#include "dipaco_job.hpp"

namespace paco_train {

int run_dipaco(const gpt_settings& cfg, const dipaco_request& r) {
  try {
    // A new run keeps its configuration (the file was read before: it can be read again).
    const auto src = job::config_source::read(r.roles.config_path, r.roles.overrides);
    const auto dj =
        make_job(cfg, job::config_source{r.roles.config_path, {}, r.roles.overrides}.args(),
                 r.export_hf, src && !r.from_run_dir ? src->record() : std::string());
    // The library's roles (job/main.hpp), as any program's DiPaCo job runs them.
    return job::run_role(dj, r.roles);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paco_train (%s): %s\n", r.roles.role.c_str(), e.what());
    return 2;
  }
}

}  // namespace paco_train
