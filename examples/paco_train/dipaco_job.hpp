#pragma once
// paco_train's DiPaCo job (job.mode = "dipaco"): the library's job layer (include/paco/job/)
// configured with paco_train's GPT. The library runs the launcher, store and worker roles; this
// file says what only paco_train knows: the model's configuration (its fingerprint, the same
// text as before the job layer, so older checkpoints still resume), how a child process gets the
// same configuration (--config and every --set), how an exported model is written (nn::save_gpt,
// and Hugging Face's GPT-2 layout with --export-hf) and the GPT's CUDA worker.
//
// Across machines: the same binary with --role store / --role worker --worker N on each
// machine, the same config (launch.store_host = the store machine) and the same PACO_TOKEN;
// copy the run directory that `--role prepare` wrote to every machine (docs/03_distributed.md).

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "config.hpp"
#include "device_worker.hpp"
#include "paco/job/job.hpp"
#include "paco/nn/gpt_file.hpp"
#include "paco/nn/nn.hpp"

namespace paco_train {

namespace fs = std::filesystem;
using namespace paco;
using json = nlohmann::json;
using job::exit_bad_input;
using job::exit_link_lost;
using job::exit_write_failed;
using job::ln2;
using job::random_token;
using job::require_token;
using job::run_dir;
using job::spawn;
using job::token_from_env;
using job::write_tries;

using gpt_job = job::dipaco_job<nn::gpt>;

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
inline gpt_job make_job(const train_config& cfg, std::vector<std::string> child_args = {},
                        bool export_hf = false, std::string record = {}) {
  const std::string gemm = cfg.train.gemm;
  return gpt_job{static_cast<const job::settings&>(cfg),
                 nn::gpt(cfg.model),
                 gpt_fingerprint(cfg.model),
                 nn::gpt_config_json(cfg.model),
                 "paco_train",
                 std::move(child_args),
                 [gemm](int id, const nn::gpt& model, std::vector<path::level_span> levels,
                        std::vector<int> modules, optim::adamw opt, const train::inner_config& icfg,
                        const io::token_stream& shard, std::uint64_t seed,
                        const store::compression& compression) {
                   return make_device_path_worker(id, model, std::move(levels), std::move(modules),
                                                  opt, icfg, shard, seed, gemm, compression);
                 },
                 [export_hf](const fs::path& out, const std::string& stem, const nn::gpt& model,
                             const float* theta, const std::map<std::string, std::string>& meta) {
                   return export_model(out, stem, model, theta, meta, export_hf);
                 },
                 std::move(record)};
}

// This process's configuration. In an engine's launch (a rank of a world of two or more in the
// environment: mpirun, srun; launcher: no --role, --export or --score) it is read once, on rank
// 0, and sent to every rank (job::launch_configuration): the file's text and the overrides
// (job::config_source's record), when they say launch.mode = "mpi" (or, when they cannot be
// read, the command line does); the other ranks open no file. Otherwise: read here.
inline result<train_config> engine_configuration(const std::string& config_path,
                                                 const std::vector<std::string>& overrides,
                                                 bool launcher) {
  if (!launcher) return load_config(config_path, overrides);
  return job::launch_configuration<train_config>(
      [&]() -> result<std::string> {
        auto src = job::config_source::read(config_path, overrides);
        if (!src) return src.error();
        return src->record();
      },
      [](const std::string& shared) -> result<train_config> {
        auto src = job::config_source::of_record(shared, "rank 0's message");
        if (!src) return src.error();
        return load_config(*src);
      },
      [](const train_config& c) -> result<bool> {
        if (c.launch.mode != "mpi") return false;
        if (c.job.mode != "dipaco")
          return error(errc::invalid_argument,
                       "launch.mode = \"mpi\" launches DiPaCo jobs (job.mode = \"dipaco\"), not "
                       "job.mode = \"" +
                           c.job.mode + "\"");
        return true;
      },
      std::any_of(overrides.begin(), overrides.end(), job::config_source::says_mpi),
      job::meeting_epoch_configuration);
}

}  // namespace paco_train
