#pragma once
// --export of a DiPaCo run: every path (and the base model) as a model file of its own.
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/run_files.hpp"

namespace paco::job {

// Writes the base model as "base" and every path as "path-E0-E1…" (its expert per level) to
// out with cfg.write_model (write_safetensors_model when unset), from the run's base model and
// store checkpoint. Errors name the file.
template <nn::BlockModel Model>
status export_paths(const dipaco_job<Model>& cfg, const run_dir& rd, const fs::path& out) {
  const path::path_plan g = make_plan(cfg);
  const Model& model = cfg.model;
  arena<host> base(model.layout());
  if (auto s = load_base(cfg, rd, model, base); !s) return s;
  store::module_store<store_outer> store(g.module_table(), outer_of(cfg));
  if (auto s = load_store(cfg, rd, g, store); !s) return s;
  fs::create_directories(out);
  const auto write = [&](const fs::path& o, const std::string& stem, const Model& m,
                         const float* theta, const std::map<std::string, std::string>& meta) {
    return cfg.write_model ? cfg.write_model(o, stem, m, theta, meta)
                           : write_safetensors_model(o, stem, m, theta, meta);
  };
  const float* b = base.get(plane::param).data();
  if (auto s = write(out, "base", model, b, {{"source", rd.base().string()}, {"path", "base"}}); !s)
    return s;
  for (int p = 0; p < g.paths(); ++p) {
    std::vector<float> th(b, b + model.layout().total());
    long round = 0;
    g.assemble(p, th.data(),
               [&](int m, std::span<float> dst) { round = store.pull(m, dst).first; });
    const std::string name = g.path_name(p);
    std::string stem = "path";  // path (0,1) → path-0-1.safetensors
    for (int e : g.path_experts(p)) stem += "-" + std::to_string(e);
    if (auto s = write(out, stem, model, th.data(),
                       {{"source", rd.store().string()},
                        {"path", name},
                        {"grid", g.describe()},
                        {"round", std::to_string(round)}});
        !s)
      return s;
  }
  return {};
}

}  // namespace paco::job
