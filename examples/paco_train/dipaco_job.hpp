#pragma once
// paco_train's job: the library's job layer (include/paco/job/) configured with paco_train's GPT
// (job/gpt_settings.hpp). The library runs the LM job, the pipeline's stages and the DiPaCo
// job's launcher, store and worker roles; this
// file says what only paco_train knows: the model's configuration (its fingerprint, the same
// text as before the job layer, so older checkpoints still resume), how a child process gets the
// same configuration (--config and every --set), how an exported model is written (nn::save_gpt,
// and Hugging Face's GPT-2 layout with --export-hf) and the GPT's CUDA trainer and worker.
//
// Across machines: the same binary with --role store / --role worker --worker N on each
// machine, the same config (launch.store_host = the store machine) and the same PACO_TOKEN;
// copy the run directory that `--role prepare` wrote to every machine (docs/03_distributed.md).

#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "device.hpp"
#include "paco/job/gpt_settings.hpp"
#include "paco/job/job.hpp"
#include "paco/nn/gpt_file.hpp"
#include "paco/nn/nn.hpp"

namespace paco_train {

namespace fs = std::filesystem;
using namespace paco;
using gpt_job = job::dipaco_job<nn::gpt>;
using job::gpt_settings;

// One exported model: out/<stem>.safetensors (nn::save_gpt), and with hf also out/hf/<stem>/
// in Hugging Face's GPT-2 layout (nn::save_gpt_hf). Errors name the file.
inline status export_model(const fs::path& out, const std::string& stem, const nn::gpt& model,
                           const float* theta, const std::map<std::string, std::string>& meta,
                           bool hf) {
  const fs::path file = out / (stem + ".safetensors");
  if (auto s = nn::save_gpt(file, model, theta, meta); !s) return s;
  std::printf("paco_train: wrote %s\n", file.c_str());
  if (!hf) return {};
  if (auto s = nn::save_gpt_hf(out / "hf" / stem, model, theta, meta); !s) return s;
  std::printf("paco_train: wrote %s/ (Hugging Face GPT-2 layout)\n", (out / "hf" / stem).c_str());
  return {};
}

// The GPT's configuration as the checkpoints of paco_train's DiPaCo jobs record it.
inline std::string gpt_fingerprint(const nn::gpt_config& m) {
  std::ostringstream o;
  o << "model.vocab=" << m.vocab << " model.ctx=" << m.ctx << " model.d=" << m.d
    << " model.layers=" << m.layers << " model.heads=" << m.heads;
  return o.str();
}

// The job of a validated configuration. export_hf: --export also writes Hugging Face's layout.
// record: config_source::record's (kept by a new run in its directory; empty: none).
inline gpt_job make_job(const gpt_settings& cfg, std::vector<std::string> child_args = {},
                        bool export_hf = false, std::string record = {}) {
  const std::string gemm = cfg.train.gemm;
  return gpt_job{
      static_cast<const job::settings&>(cfg),
      nn::gpt(cfg.model),
      gpt_fingerprint(cfg.model),
      nn::gpt_config_json(cfg.model),
      "paco_train",
      std::move(child_args),
      [gemm](int id, const nn::gpt& model, std::vector<path::level_span> levels,
             std::vector<int> modules, optim::adamw opt, const train::inner_config& icfg,
             const io::token_stream& shard, std::uint64_t seed,
             const store::compression& compression) {
        return make_device_path_worker(id, model, std::move(levels), std::move(modules), opt, icfg,
                                       shard, seed, gemm, compression);
      },
      [gemm](const nn::gpt& model, const train::inner_config& icfg, const io::token_stream& shard,
             std::uint64_t seed) { return make_device_lm(model, icfg, shard, seed, gemm); },
      [export_hf](const fs::path& out, const std::string& stem, const nn::gpt& model,
                  const float* theta, const std::map<std::string, std::string>& meta) {
        return export_model(out, stem, model, theta, meta, export_hf);
      },
      std::move(record)};
}

}  // namespace paco_train
