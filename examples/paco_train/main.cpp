// paco_train: trains paco's byte-level GPT on the Brown corpus from a TOML config, with a
// progress display, periodic validation bits-per-byte, atomic checkpoints, JSONL metrics and a
// final summary table.
//
//   paco_train --config examples/configs/lm_brown.toml [--set train.steps=300] [--resume]
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>

#include "config.hpp"
#include "device_lm.hpp"
#include "dipaco_job.hpp"
#include "dipaco_main.hpp"
#include "paco/io/io.hpp"
#include "paco/job/pipeline_job.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/route/evaluate.hpp"
#include "paco/train/inner_loop.hpp"

namespace fs = std::filesystem;
using namespace paco;

namespace {

constexpr double ln2 = 0.6931471805599453;

using route::score_bpb;

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
  {
    paco_train::train_config shown;
    job::setting_fields f;
    paco_train::add_fields(f, shown);
    app.footer(
        "Settings (in the -c file as [section] key = value, or --set section.key=value), with "
        "their defaults:\n" +
        f.listing());
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // help printed, or the flag's error (bad input)
  }
  const std::string& role = c.role;

  // --export, --score or --results of a run named by its directory alone: the configuration the
  // run kept (job_config.json). Otherwise one rank of an engine's launch (mpirun, srun:
  // launch.mode = "mpi") reads the configuration on rank 0 only; the other ranks receive it
  // (paco_train::engine_configuration).
  req.from_run_dir = !c.configured() && !c.run_dir.empty() && c.reads_run();
  auto cfg_r = [&]() -> result<paco_train::train_config> {
    if (!req.from_run_dir)
      return paco_train::engine_configuration(c.config_path, c.overrides,
                                              role == "launcher" && !c.reads_run());
    const fs::path rec = job::run_dir{c.run_dir}.config_record();
    auto text = job::read_config_text(rec);
    if (!text)
      return error(text.error().code, text.error().message +
                                          " (a run keeps its configuration there; without it, "
                                          "give the run's -c and --set again)");
    auto src = job::config_source::of_record(*text, "'" + rec.string() + "'");
    if (!src) return src.error();
    return paco_train::load_config(*src);
  }();
  if (!cfg_r) {
    std::fprintf(stderr, "paco_train: %s\n", cfg_r.error().what().c_str());
    return 2;
  }
  const auto cfg = *cfg_r;
  // A device run on a build or machine without one fails here, before any data or process.
  if (cfg.train.device == "cuda" && c.export_dir.empty())
    if (auto s = paco_train::device_available(); !s)
      return std::fprintf(stderr, "paco_train: %s\n", s.error().what().c_str()), 2;
  if (cfg.job.mode == "dipaco") return paco_train::run_dipaco(cfg, req);
  if (cfg.job.mode == "pipeline") {
    if (!c.export_dir.empty())
      return std::fprintf(stderr,
                          "paco_train: --export is not offered by pipeline jobs (stage 0 "
                          "scores the gathered model)\n"),
             2;
    if (from_step >= 0 && role != "stage")
      return std::fprintf(stderr,
                          "paco_train: --from-step is for --role stage (the launcher's "
                          "--resume finds the step)\n"),
             2;
    try {
      const auto pj =
          paco_train::make_job(cfg, job::config_source{c.config_path, {}, c.overrides}.args());
      if (role == "stage") return job::run_pipeline_stage(pj, c.stage, c.peers, from_step);
      if (role == "launcher") return job::run_pipeline_launcher(pj, c.resume, c.fresh);
      return std::fprintf(stderr, "paco_train: --role %s is not a pipeline role\n", role.c_str()),
             2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "paco_train (%s): %s\n", role.c_str(), e.what());
      return 2;
    }
  }
  if (role != "launcher") {
    std::fprintf(stderr, "paco_train: --role is for job.mode = \"dipaco\" or \"pipeline\"\n");
    return 2;
  }
  const auto& tc = cfg.train;
  if (!c.export_dir.empty()) {  // the LM job's checkpoint as a model file
    const fs::path ckpt = fs::path(cfg.output.dir) / "checkpoint.safetensors";
    nn::gpt model(cfg.model);
    arena<host> a(model.layout());
    auto info = io::load_checkpoint(ckpt, model.tensors(), a);
    if (!info)
      return std::fprintf(stderr, "paco_train: export: %s\n", info.error().what().c_str()), 2;
    fs::create_directories(c.export_dir);
    if (auto s = paco_train::export_model(
            c.export_dir, "model", model, a.get(plane::param).data(),
            {{"source", ckpt.string()}, {"step", std::to_string(info->step)}}, req.export_hf);
        !s)
      return std::fprintf(stderr, "paco_train: export: %s\n", s.error().what().c_str()), 2;
    return 0;
  }

  // ---- data ----
  auto corpus = paco_train::load_data(cfg.data);
  if (!corpus) {
    std::fprintf(stderr, "paco_train: %s\n", corpus.error().what().c_str());
    return 2;
  }
  auto train_docs = corpus->subset(io::split::train);
  auto val_docs = corpus->subset(io::split::validation);
  auto test_docs = corpus->subset(io::split::test);
  auto train_s = io::token_stream::from(train_docs), val_s = io::token_stream::from(val_docs),
       test_s = io::token_stream::from(test_docs);
  auto tokens_of = [](const io::corpus& c) {
    io::byte_tokenizer tok;
    std::vector<std::vector<std::int32_t>> d;
    for (auto& doc : c.docs) d.push_back(tok.encode(doc.text));
    return d;
  };
  const auto val_tokens = tokens_of(val_docs), test_tokens = tokens_of(test_docs);
  std::printf(
      "paco_train: corpus %s %zu documents: train %zu (%.2f MB), validation %zu "
      "(%.2f MB), test %zu (%.2f MB)\n",
      corpus->source.c_str(), corpus->docs.size(), train_docs.docs.size(), train_s.ids.size() / 1e6,
      val_docs.docs.size(), val_s.ids.size() / 1e6, test_docs.docs.size(), test_s.ids.size() / 1e6);

  // ---- model ----
  nn::gpt model(cfg.model);
  arena<host> a(model.layout());
  model.init(a, std::uint64_t(tc.seed));
  a.zero(plane::moment1);
  a.zero(plane::moment2);
  const int B = tc.batch, T = cfg.model.ctx;
  const auto rule = route::sliding_window::make(T).value_or_throw();
  auto eval_ws = model.make_workspace({B, T});
  auto bpb = [&](const std::vector<std::vector<std::int32_t>>& docs, std::size_t budget) {
    return score_bpb(model, a.get(plane::param).data(), docs, budget, rule, eval_ws);
  };

  fs::create_directories(cfg.output.dir);
  const fs::path ckpt = fs::path(cfg.output.dir) / "checkpoint.safetensors";
  long step = 0;
  if (c.resume && !fs::exists(ckpt)) {
    std::fprintf(stderr,
                 "paco_train: cannot resume: no checkpoint '%s' (run without --resume to start)\n",
                 ckpt.c_str());
    return 2;
  }
  if (c.resume) {
    auto info = io::load_checkpoint(ckpt, model.tensors(), a);
    if (!info) {
      std::fprintf(stderr, "paco_train: cannot resume: %s\n", info.error().what().c_str());
      return 2;
    }
    step = info->step;
    std::printf("paco_train: resumed from %s at step %ld\n", ckpt.c_str(), step);
  }
  auto metrics = io::metrics_log::open(fs::path(cfg.output.dir) / "metrics.jsonl", c.resume);
  if (!metrics) {
    std::fprintf(stderr, "paco_train: %s\n", metrics.error().what().c_str());
    return 2;
  }

  optim::adamw opt{
      .lr = tc.lr, .beta1 = tc.beta1, .beta2 = tc.beta2, .weight_decay = tc.weight_decay};
  // The one inner loop (train/inner_loop.hpp), continuing the step count of a resumed run; the
  // learning rate of each step is chosen below (by step, or by elapsed time).
  // With train.device = "cuda" the same loop runs on the device (device_lm.hpp); θ and the
  // moments come back to the host arena only to evaluate and to checkpoint.
  const train::inner_config icfg{
      .batch = B, .ctx = T, .grad_clip = tc.grad_clip, .threads = tc.threads, .start_step = step};
  const std::uint64_t sampler_seed = std::uint64_t(tc.seed) * 7919 + std::uint64_t(step);
  std::optional<train::inner_loop<nn::gpt, optim::adamw>> loop;
  std::unique_ptr<paco_train::device_lm> dev;
  std::string backend;
  if (tc.device == "cuda") {
    auto d = paco_train::make_device_lm(model, icfg, train_s, sampler_seed, tc.gemm);
    if (!d) return std::fprintf(stderr, "paco_train: %s\n", d.error().what().c_str()), 2;
    dev = std::move(*d);
    if (auto s = dev->upload(a); !s)
      return std::fprintf(stderr, "paco_train: %s\n", s.error().what().c_str()), 2;
    backend = dev->describe();
  } else {
    loop.emplace(model, icfg, train_s, sampler_seed);
    backend = std::to_string(loop->replica().threads()) + " threads, GEMM " + nn::gemm_backend();
  }
  auto to_host = [&] {  // the device's θ and moments into `a` (evaluation, checkpoints)
    if (!dev) return true;
    const auto s = dev->download(a);
    if (!s) std::fprintf(stderr, "\npaco_train: %s\n", s.error().what().c_str());
    return s.ok();
  };
  std::printf("paco_train: GPT d=%d layers=%d heads=%d ctx=%d, %.2fM parameters, batch %d, %s\n",
              cfg.model.d, cfg.model.layers, cfg.model.heads, T, model.param_count() / 1e6, B,
              backend.c_str());

  // Steps: a fixed count with a cosine schedule over steps, or (steps == 0) a wall-clock budget
  // with the cosine schedule over elapsed time: training ends when budget_s has passed.
  const bool timed = tc.steps == 0;
  const auto t_start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };
  optim::warmup_cosine sched{
      .lr = tc.lr, .min_lr = tc.min_lr, .warmup = tc.warmup, .total = std::max(tc.steps, 1L)};
  io::progress bar(timed ? "train (s)" : "train", timed ? long(tc.budget_s) : tc.steps);
  double val_bpb = NAN, last_loss = NAN, loss_ema = NAN;
  long tokens = 0;
  for (;;) {
    const double el0 = elapsed();
    if (timed ? el0 >= tc.budget_s : step >= tc.steps) break;
    ++step;
    const float lr = timed ? sched.lr_at_fraction(step, el0 / tc.budget_s) : sched.lr_at(step);
    last_loss = dev ? dev->step(opt, lr) : loop->step(a, opt, lr);
    tokens += long(B) * T;
    loss_ema = std::isnan(loss_ema) ? last_loss : 0.95 * loss_ema + 0.05 * last_loss;
    const double el = elapsed();
    const bool last = timed ? el >= tc.budget_s : step >= tc.steps;
    const bool eval = step % tc.eval_every == 0 || last,
               save = step % tc.checkpoint_every == 0 || last;
    if ((eval || save) && !to_host()) return 2;
    if (eval)
      val_bpb = bpb(val_tokens, std::size_t(tc.eval_batches) * std::size_t(B) * std::size_t(T));
    if (save) {
      std::ostringstream meta;
      meta << "{\"d\":" << cfg.model.d << ",\"layers\":" << cfg.model.layers
           << ",\"heads\":" << cfg.model.heads << ",\"ctx\":" << cfg.model.ctx << "}";
      // A checkpoint that cannot be written (after retries) ends the run: training on would
      // lose every step since the last one that was.
      if (auto s = io::with_retries(
              [&] {
                return io::save_checkpoint(ckpt, model.tensors(), a, step, {{"model", meta.str()}});
              },
              paco_train::write_tries);
          !s)
        return std::fprintf(stderr, "\npaco_train: checkpoint failed: %s\n",
                            s.error().what().c_str()),
               paco_train::exit_write_failed;
    }
    if (auto s = metrics->write(
            {{"step", step},
             {"loss", last_loss},
             {"lr", lr},
             {"val_bpb", std::isnan(val_bpb) ? nlohmann::json() : nlohmann::json(val_bpb)},
             {"elapsed_s", el}});
        !s)
      return std::fprintf(stderr, "\npaco_train: %s\n", s.error().what().c_str()),
             paco_train::exit_write_failed;
    char text[160];
    std::snprintf(text, sizeof text,
                  "step %ld loss %.3f (%.2f bpb) val %.3f bpb lr %.1e %.0f tok/s", step, loss_ema,
                  loss_ema / ln2, val_bpb, lr, tokens / std::max(el, 1e-9));
    bar.update(timed ? std::min(long(el), long(tc.budget_s)) : step, text);
  }
  bar.finish();
  const double train_s_elapsed = elapsed();

  std::printf("paco_train: final evaluation on the whole validation and test splits...\n");
  const double val_final = bpb(val_tokens, 0);
  const double test_final = bpb(test_tokens, 0);
  if (auto s = metrics->write({{"final", true},
                               {"val_bpb", val_final},
                               {"test_bpb", test_final},
                               {"steps", step},
                               {"train_s", train_s_elapsed}});
      !s)
    return std::fprintf(stderr, "paco_train: %s\n", s.error().what().c_str()),
           paco_train::exit_write_failed;

  std::printf("\n");
  io::table results({"result", "value"});
  auto row = [&](const char* k, const std::string& v) { results.add({k, v}); };
  row("model", "GPT " + io::cell(model.param_count() / 1e6, 2, "M parameters"));
  row("steps x batch x ctx",
      std::to_string(step) + " x " + std::to_string(B) + " x " + std::to_string(T));
  row("training time", io::cell(train_s_elapsed, 1, " s"));
  row("throughput", io::cell(tokens / train_s_elapsed, 0, " tokens/s"));
  row("final train loss (EMA)", io::cell(loss_ema / ln2, 3, " bits/byte"));
  row("validation (whole split)", io::cell(val_final, 3, " bits/byte"));
  row("test (whole split)", io::cell(test_final, 3, " bits/byte"));
  row("scorer", rule.name());
  row("checkpoint", ckpt.string());
  row("metrics", (fs::path(cfg.output.dir) / "metrics.jsonl").string());
  results.print(stdout);
  return 0;
}
