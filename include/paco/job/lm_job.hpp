#pragma once
// The LM job (job.mode = "lm"): one model trained on one machine by the one inner loop
// (train/inner_loop.hpp), on the host or on a device (dipaco_job::make_device_lm), with a
// progress display, periodic validation bits-per-byte, atomic checkpoints, JSONL metrics and a
// final results table; and the export of its checkpoint as a model file.
//
//   run_lm(job, resume)   trains; returns the process's exit code
//   export_lm(job, dir)   the checkpoint in job.output.dir as dir/model… (job.write_model)
//
// Steps: train.steps with a cosine schedule over steps, or (steps = 0) a wall-clock budget
// (train.budget_s) with the cosine schedule over elapsed time. Files in output.dir:
// checkpoint.safetensors (θ and the AdamW moments, every checkpoint_every steps and at the end)
// and metrics.jsonl (a line a step, and the final validation and test bits-per-byte).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/batches.hpp"
#include "paco/io/checkpoint.hpp"
#include "paco/io/metrics.hpp"
#include "paco/io/progress.hpp"
#include "paco/io/table.hpp"
#include "paco/io/tokenizer.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/nn/gemm.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/optim/schedule.hpp"
#include "paco/route/evaluate.hpp"
#include "paco/train/inner_loop.hpp"

namespace paco::job {

namespace detail {

inline int lm_failed(const std::string& program, const error& e, int code = exit_bad_input) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), e.what().c_str());
  return code;
}

inline std::vector<std::vector<std::int32_t>> byte_tokens(const io::corpus& c) {
  io::byte_tokenizer tok;
  std::vector<std::vector<std::int32_t>> d;
  for (auto& doc : c.docs) d.push_back(tok.encode(doc.text));
  return d;
}

}  // namespace detail

// The checkpoint of j's LM job (output.dir/checkpoint.safetensors) as out/model… through
// j.write_model (write_safetensors_model when unset), its meta naming the source and step.
// Returns the process's exit code: 0, or exit_bad_input naming the file.
template <nn::BlockModel Model>
int export_lm(const dipaco_job<Model>& j, const fs::path& out) {
  const fs::path ckpt = fs::path(j.output.dir) / "checkpoint.safetensors";
  arena<host> a(j.model.layout());
  auto info = io::load_checkpoint(ckpt, j.model.tensors(), a);
  if (!info) return detail::lm_failed(j.program + ": export", info.error());
  fs::create_directories(out);
  const std::map<std::string, std::string> meta{{"source", ckpt.string()},
                                                {"step", std::to_string(info->step)}};
  const float* theta = a.get(plane::param).data();
  const auto s = j.write_model ? j.write_model(out, "model", j.model, theta, meta)
                               : write_safetensors_model(out, "model", j.model, theta, meta);
  if (!s) return detail::lm_failed(j.program + ": export", s.error());
  return 0;
}

// Trains j's model on its corpus's train split (resume: from output.dir's checkpoint, its step
// count and sampler continued), printing progress, and ends with the whole validation and test
// splits scored (route::score_bpb, sliding windows of the model's context) and a results table.
// Returns the process's exit code: 0; exit_bad_input (data, a checkpoint to resume that is
// missing or damaged, no device); exit_write_failed (a checkpoint or metrics line that could not
// be written after write_tries: training on would lose every step since the last one that was).
template <nn::BlockModel Model>
int run_lm(const dipaco_job<Model>& j, bool resume) {
  using clock = std::chrono::steady_clock;
  const char* prog = j.program.c_str();
  const auto& tc = j.train;
  auto corpus = load_data(j.data);
  if (!corpus) return detail::lm_failed(j.program, corpus.error());
  const auto train_docs = corpus->subset(io::split::train);
  const auto val_docs = corpus->subset(io::split::validation);
  const auto test_docs = corpus->subset(io::split::test);
  const auto train_s = io::token_stream::from(train_docs);
  const auto val_tokens = detail::byte_tokens(val_docs),
             test_tokens = detail::byte_tokens(test_docs);
  std::printf(
      "%s: corpus %s %zu documents: train %zu (%.2f MB), validation %zu (%.2f MB), test %zu "
      "(%.2f MB)\n",
      prog, corpus->source.c_str(), corpus->docs.size(), train_docs.docs.size(),
      train_s.ids.size() / 1e6, val_docs.docs.size(),
      io::token_stream::from(val_docs).ids.size() / 1e6, test_docs.docs.size(),
      io::token_stream::from(test_docs).ids.size() / 1e6);

  const Model& model = j.model;
  arena<host> a(model.layout());
  model.init(a, std::uint64_t(tc.seed));
  a.zero(plane::moment1);
  a.zero(plane::moment2);
  const int B = tc.batch, T = model.shape().ctx;
  const auto rule = route::sliding_window::make(T).value_or_throw();
  auto eval_ws = model.make_workspace({B, T});
  auto bpb = [&](const std::vector<std::vector<std::int32_t>>& docs, std::size_t budget) {
    return route::score_bpb(model, a.get(plane::param).data(), docs, budget, rule, eval_ws);
  };

  fs::create_directories(j.output.dir);
  const fs::path ckpt = fs::path(j.output.dir) / "checkpoint.safetensors";
  long step = 0;
  if (resume) {
    if (!fs::exists(ckpt))
      return detail::lm_failed(
          j.program, error(errc::not_found, "cannot resume: no checkpoint '" + ckpt.string() +
                                                "' (run without --resume to "
                                                "start)"));
    auto info = io::load_checkpoint(ckpt, model.tensors(), a);
    if (!info)
      return detail::lm_failed(j.program,
                               error(info.error().code, "cannot resume: " + info.error().message));
    step = info->step;
    std::printf("%s: resumed from %s at step %ld\n", prog, ckpt.c_str(), step);
  }
  auto metrics = io::metrics_log::open(fs::path(j.output.dir) / "metrics.jsonl", resume);
  if (!metrics) return detail::lm_failed(j.program, metrics.error());

  const optim::adamw opt{
      .lr = tc.lr, .beta1 = tc.beta1, .beta2 = tc.beta2, .weight_decay = tc.weight_decay};
  // The one inner loop, continuing the step count of a resumed run; on a device the same loop
  // runs there, and θ and the moments come back to the host arena only to evaluate and to save.
  const train::inner_config icfg{
      .batch = B, .ctx = T, .grad_clip = tc.grad_clip, .threads = tc.threads, .start_step = step};
  const std::uint64_t sampler_seed = std::uint64_t(tc.seed) * 7919 + std::uint64_t(step);
  std::optional<train::inner_loop<Model, optim::adamw>> loop;
  std::unique_ptr<device_lm> dev;
  std::string backend;
  if (tc.device == "cuda") {
    auto d = j.make_device_lm
                 ? j.make_device_lm(model, icfg, train_s, sampler_seed)
                 : result<std::unique_ptr<device_lm>>(error(
                       errc::unsupported, "train.device = \"cuda\": this job has no device LM"));
    if (!d) return detail::lm_failed(j.program, d.error());
    dev = std::move(*d);
    if (auto s = dev->upload(a); !s) return detail::lm_failed(j.program, s.error());
    backend = dev->describe();
  } else {
    loop.emplace(model, icfg, train_s, sampler_seed);
    backend = std::to_string(loop->replica().threads()) + " threads, GEMM " + nn::gemm_backend();
  }
  std::printf("%s: %s, %.2fM parameters, batch %d, %s\n", prog, model_description(j).c_str(),
              model.param_count() / 1e6, B, backend.c_str());

  const bool timed = tc.steps == 0;
  const auto t_start = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t_start).count(); };
  const optim::warmup_cosine sched{
      .lr = tc.lr, .min_lr = tc.min_lr, .warmup = tc.warmup, .total = std::max(tc.steps, 1L)};
  io::progress bar(timed ? "train (s)" : "train", timed ? long(tc.budget_s) : tc.steps);
  auto failed = [&](const std::string& what, const error& e, int code = exit_write_failed) {
    std::fputc('\n', stderr);  // below the progress line
    return detail::lm_failed(what, e, code);
  };
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
    if (eval || save)
      if (dev)
        if (auto s = dev->download(a); !s) return failed(j.program, s.error(), exit_bad_input);
    if (eval)
      val_bpb = bpb(val_tokens, std::size_t(tc.eval_batches) * std::size_t(B) * std::size_t(T));
    if (save)
      if (auto s = io::with_retries(
              [&] {
                return io::save_checkpoint(
                    ckpt, model.tensors(), a, step,
                    {{"model", j.model_config.empty() ? describe_model(model) : j.model_config}});
              },
              write_tries);
          !s)
        return failed(j.program + ": checkpoint failed", s.error());
    if (auto s = metrics->write({{"step", step},
                                 {"loss", last_loss},
                                 {"lr", lr},
                                 {"val_bpb", std::isnan(val_bpb) ? json() : json(val_bpb)},
                                 {"elapsed_s", el}});
        !s)
      return failed(j.program, s.error());
    char text[160];
    std::snprintf(text, sizeof text,
                  "step %ld loss %.3f (%.2f bpb) val %.3f bpb lr %.1e %.0f tok/s", step, loss_ema,
                  loss_ema / ln2, val_bpb, lr, tokens / std::max(el, 1e-9));
    bar.update(timed ? std::min(long(el), long(tc.budget_s)) : step, text);
  }
  bar.finish();
  const double train_seconds = elapsed();

  std::printf("%s: final evaluation on the whole validation and test splits...\n", prog);
  const double val_final = bpb(val_tokens, 0), test_final = bpb(test_tokens, 0);
  if (auto s = metrics->write({{"final", true},
                               {"val_bpb", val_final},
                               {"test_bpb", test_final},
                               {"steps", step},
                               {"train_s", train_seconds}});
      !s)
    return detail::lm_failed(j.program, s.error(), exit_write_failed);

  std::printf("\n");
  io::table results({"result", "value"});
  auto row = [&](const char* k, const std::string& v) { results.add({k, v}); };
  row("model", io::cell(model.param_count() / 1e6, 2, "M parameters"));
  row("steps x batch x ctx",
      std::to_string(step) + " x " + std::to_string(B) + " x " + std::to_string(T));
  row("training time", io::cell(train_seconds, 1, " s"));
  row("throughput", io::cell(tokens / train_seconds, 0, " tokens/s"));
  row("final train loss (EMA)", io::cell(loss_ema / ln2, 3, " bits/byte"));
  row("validation (whole split)", io::cell(val_final, 3, " bits/byte"));
  row("test (whole split)", io::cell(test_final, 3, " bits/byte"));
  row("scorer", rule.name());
  row("checkpoint", ckpt.string());
  row("metrics", (fs::path(j.output.dir) / "metrics.jsonl").string());
  results.print(stdout);
  return 0;
}

}  // namespace paco::job
