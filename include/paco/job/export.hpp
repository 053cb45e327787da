#pragma once
// --export of a DiPaCo run: what a user takes elsewhere, in one directory.
//   base.*, path-E0-E1….*   the base model and every path (dipaco_job::write_model: paco_train
//                           writes GPT-2-named safetensors, and with --export-hf Hugging Face's
//                           layout under hf/ with a byte tokenizer; nn/gpt_file.hpp)
//   router.json             the run's router, so that new text is routed from these files alone:
//                           its features (the base model's last block output, before the final
//                           norm, averaged over a text's first `prefix` bytes), k-means centroids
//                           (route = the nearest, the first of equals) and each path's file stem
//   README.md               the model card: a metadata header (YAML front matter: library,
//                           tags, dataset), the model, grid, data and split, scorer, the run's
//                           figures (its results.json) and configuration, and how to use the files
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <fstream>
#include <sstream>

#include "paco/core/arena.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/json_read.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/run_files.hpp"

namespace paco::job {

// A figure of results.json as the card prints it ("-" where there is none: no document scored).
inline std::string figure(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return "-";
  std::ostringstream o;
  o << j[key].get<double>();
  return o.str();
}

// The export's README.md (see the file comment).
template <nn::BlockModel Model>
std::string model_card(const dipaco_job<Model>& cfg, const run_dir& rd, const path::path_plan& g,
                       const std::vector<std::string>& stems, long round, bool router) {
  std::ostringstream o;
  // The metadata header model hubs read (YAML front matter).
  o << "---\nlibrary_name: paco\ntags:\n  - dipaco\n  - byte-level\n  - text-generation\n"
    << "datasets:\n  - " << cfg.data.corpus << "\n---\n\n";
  o << "# " << cfg.program << ": DiPaCo paths of one run\n\n"
    << "Exported from the run directory `" << rd.dir.string() << "` (run id " <<
      [&] {
        auto r = read_routing(rd);
        return r ? r->value("run_id", std::string("?")) : std::string("?");
      }()
    << ").\n\n"
    << "## Model\n\n"
    << "- " << model_description(cfg) << "\n"
    << "- configuration: `"
    << (cfg.model_config.empty() ? describe_model(cfg.model) : cfg.model_config) << "`\n"
    << "- a byte-level language model: a text's UTF-8 bytes are its token ids (0-255), no "
       "special tokens; documents were run together with no boundary token\n"
    << "- grid " << g.describe() << ": " << g.paths() << " paths over " << g.levels() << " levels, "
    << g.modules() << " modules; each path is a whole model of its own\n\n"
    << "| file stem | path | modules |\n|---|---|---|\n";
  for (int p = 0; p < g.paths(); ++p) {
    o << "| `" << stems[std::size_t(p)] << "` | " << g.path_name(p) << " |";
    for (int m : g.path_modules(p)) o << " " << m;
    o << " |\n";
  }
  o << "| `base` | the shared base model (the router's feature extractor) | |\n\n"
    << "## Training\n\n"
    << "- DiPaCo: " << cfg.dipaco.rounds << " rounds (the store's modules at round " << round
    << ") of " << cfg.dipaco.inner_steps << " inner AdamW steps (batch " << cfg.train.batch
    << ", lr " << cfg.train.lr << " → " << cfg.train.min_lr << "), outer " << cfg.dipaco.outer
    << " (lr " << cfg.dipaco.outer_lr << ", momentum " << cfg.dipaco.outer_momentum << "), sync "
    << cfg.sync.mode << ", pushes " << cfg.dipaco.compress << "; the base model "
    << cfg.dipaco.pretrain_steps << " steps on every training document first\n"
    << "- data: corpus `" << cfg.data.corpus << "`"
    << (cfg.data.path.empty() && cfg.data.dir.empty() ? "" : " at `" + data_path(cfg.data) + "`")
    << ", paco's train / validation / test split (io::corpus::subset); each path trained on the "
       "training documents its router sent it\n"
    << "- the run's configuration (its checkpoints' fingerprint): `" << config_fingerprint(cfg)
    << "`\n\n"
    << "## Results\n\n";
  std::ifstream rin(rd.dir / "results.json");
  auto read = rin ? io::json_parse(rin, "results.json") : result<json>(json());
  const json res = read ? std::move(*read) : json();  // (a damaged file: no results section)
  if (res.is_object() && res.contains("paths")) {
    o << "Scorer `" << res.value("scorer", "?") << "` on the `" << res.value("split", "?")
      << "` split: each document routed by its first " << res.value("routing_prefix", 0)
      << " bytes and scored on the rest by the path it was routed to.\n\n"
      << "| path | documents | bits/byte |\n|---|---|---|\n";
    for (auto& p : res["paths"])
      o << "| " << p.value("path", "?") << " | " << p.value("docs", 0) << " | "
        << figure(p, "bits_per_byte") << " |\n";
    if (res.contains("all_routed"))
      o << "| all (routed) | " << res["all_routed"].value("docs", 0) << " | "
        << figure(res["all_routed"], "bits_per_byte") << " |\n";
    if (res.contains("rerouted"))
      o << "| re-routed every " << res["rerouted"].value("every", 0) << " bytes | | "
        << figure(res["rerouted"], "bits_per_byte") << " |\n";
  } else {
    o << "The run directory holds no results.json (the run did not finish, or an older paco "
         "ran it).\n";
  }
  o << "\n## Use\n\n";
  if (router)
    o << "- route a text: compute the features `router.json` defines with `base`, pick the "
         "nearest centroid, and use the path whose stem `router.json` lists at that index\n";
  o << "- score or generate with the path's file; with `--export-hf` each model is also under "
       "`hf/<stem>/` in Hugging Face's GPT-2 layout with its byte tokenizer "
       "(`GPT2LMHeadModel.from_pretrained`, `PreTrainedTokenizerFast.from_pretrained`)\n"
    << "- paco itself: `--score FILE` with the run directory routes and scores new text the same "
       "way\n";
  return o.str();
}

// Writes the base model as "base" and every path as "path-E0-E1…" (its expert per level) to
// out with cfg.write_model (write_safetensors_model when unset), from the run's base model and
// store checkpoint, then router.json and the model card README.md. Errors name the file.
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
  std::vector<std::string> stems;
  long last_round = 0;
  for (int p = 0; p < g.paths(); ++p) {
    std::vector<float> th(b, b + model.layout().total());
    long round = 0;
    g.assemble(p, th.data(),
               [&](int m, std::span<float> dst) { round = store.pull(m, dst).first; });
    const std::string name = g.path_name(p);
    std::string stem = "path";  // path (0,1) → path-0-1.safetensors
    for (int e : g.path_experts(p)) stem += "-" + std::to_string(e);
    stems.push_back(stem);
    last_round = std::max(last_round, round);
    if (auto s = write(out, stem, model, th.data(),
                       {{"source", rd.store().string()},
                        {"path", name},
                        {"grid", g.describe()},
                        {"round", std::to_string(round)}});
        !s)
      return s;
  }
  auto routing = read_routing(rd);
  if (!routing) return routing.error();
  if (routing->contains("router")) {
    json r = (*routing)["router"];
    r["format"] = "paco-router-1";
    r["features"] = {
        {"model", "base"},
        {"definition",
         "the mean, over a text's first `prefix` byte ids (all of them when it is shorter; at "
         "least one), of the base model's last block output at each position (the residual "
         "stream before the final layer norm), in float32"},
        {"route",
         "the index of the nearest centroid in squared Euclidean distance (the first "
         "of equals); kind single: path 0"}};
    r["paths"] = stems;
    if (auto s = io::write_file_atomic(out / "router.json", r.dump(1) + "\n"); !s) return s;
  } else {
    std::printf(
        "%s: export: this run keeps no router (prepared by an older paco): no router.json\n",
        cfg.program.c_str());
  }
  return io::write_file_atomic(
      out / "README.md", model_card(cfg, rd, g, stems, last_round, routing->contains("router")));
}

}  // namespace paco::job
