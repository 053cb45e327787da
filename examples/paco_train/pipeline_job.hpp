#pragma once
// paco_train's pipeline job (job.mode = "pipeline"): the GPT cut into pipeline.stages stages of
// contiguous blocks, one process per stage over TCP, trained with local losses (Laskin et al.:
// an auxiliary head per stage, activations forward only) or with global backprop as GPipe or
// 1F1B (docs/pipeline.md). The library does the work (include/paco/pipeline/); this file is
// configuration, processes and the report.
//
//   launcher  (default) spawns one `--role stage --stage k --peers …` process per stage on this
//             machine, shows every stage's progress, and prints the results table; a stage that
//             fails stops the others and the launcher exits with its code.
//   stage     one stage: connects to its neighbours (PACO_TOKEN authenticates every link),
//             trains train.steps steps, logs every 10th step to <output.dir>/stage-<k>.jsonl;
//             stage 0 gathers the whole model and scores validation and test with the one scorer
//             (its log's final record); the launcher writes <output.dir>/results.json.
// launch.mode = "manual" prints the stage commands for the machines of pipeline.hosts instead.
//
// Exit codes: 0 done; 2 bad input; 3 a neighbour was lost or silent past pipeline.timeout_s;
// 4 a file could not be written.

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"
#include "dipaco_job.hpp"
#include "paco/collectives/agree.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/metrics.hpp"
#include "paco/io/progress.hpp"
#include "paco/io/table.hpp"
#include "paco/job/stages.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/free_port.hpp"
#include "paco/pipeline/pipeline.hpp"
#include "paco/train/inner_loop.hpp"
#include "score.hpp"

namespace paco_train {

using job::pipeline_options_of;
using job::split_peers;
using job::stage_link_options;

inline pipeline::stage_plan stage_plan_of(const train_config& c) {
  return (c.pipeline.split.empty() ? pipeline::stage_plan::equal(c.model.layers, c.pipeline.stages)
                                   : pipeline::stage_plan::at(c.pipeline.split, c.model.layers))
      .value_or_throw();
}

inline fs::path stage_log(const train_config& c, int k) {
  return fs::path(c.output.dir) / ("stage-" + std::to_string(k) + ".jsonl");
}

// What every stage of a run must share (job::stage_fields, with the GPT's configuration).
inline std::vector<collectives::agree_field> stage_fields(const train_config& c) {
  return job::stage_fields(
      c, gpt_fingerprint(c.model) + " model.mlp_mult=" + std::to_string(c.model.mlp_mult));
}

// One stage's process. peers: every stage's host:port, comma-separated.
inline int run_stage(const train_config& cfg, int k, const std::string& peers_csv) {
  auto fail = [&](int code, const std::string& m) {
    std::fprintf(stderr, "paco_train (stage %d): %s\n", k, m.c_str());
    return code;
  };
  if (auto s = require_token("stage"); !s) return fail(exit_bad_input, s.error().what());
  const auto peers = split_peers(peers_csv);
  if (int(peers.size()) != cfg.pipeline.stages)
    return fail(exit_bad_input, "--peers names " + std::to_string(peers.size()) + " stages, " +
                                    "pipeline.stages is " + std::to_string(cfg.pipeline.stages));
  if (k < 0 || k >= cfg.pipeline.stages)
    return fail(exit_bad_input, "--stage must be in 0.." + std::to_string(cfg.pipeline.stages - 1));
  auto corpus = load_data(cfg.data);
  if (!corpus) return fail(exit_bad_input, corpus.error().what());
  const auto train = io::token_stream::from(corpus->subset(io::split::train));
  const nn::gpt model(cfg.model);
  arena<host> a(model.layout());
  model.init(a, std::uint64_t(cfg.train.seed));
  const auto plan = stage_plan_of(cfg);
  const auto opts = pipeline_options_of(cfg);
  const int B = cfg.train.batch, T = cfg.model.ctx;
  const auto& tc = cfg.train;
  const optim::adamw opt{
      .lr = tc.lr, .beta1 = tc.beta1, .beta2 = tc.beta2, .weight_decay = tc.weight_decay};
  const optim::warmup_cosine sched{
      .lr = tc.lr, .min_lr = tc.min_lr, .warmup = tc.warmup, .total = tc.steps};
  // One stage is plain training (bit for bit, tests/pipeline): the one inner loop, on
  // train.threads cores, over the same batches.
  std::unique_ptr<net::asio_tcp> net;
  std::unique_ptr<pipeline::stage_runner<nn::gpt, net::asio_tcp>> run;
  std::optional<train::inner_loop<nn::gpt, optim::adamw>> single;
  if (plan.stages() == 1) {
    single.emplace(
        model,
        train::inner_config{.batch = B, .ctx = T, .grad_clip = tc.grad_clip, .threads = tc.threads},
        train, std::uint64_t(tc.seed));
  } else {
    auto n = net::asio_tcp::connect(stage_link_options(cfg, k, peers));
    if (!n) return fail(exit_link_lost, "cannot join the pipeline: " + n.error().what());
    net = std::move(*n);
    // Every stage runs the same model, batches and schedule, or none runs.
    collectives::collective_options agreed;
    agreed.until = net::after(std::chrono::milliseconds(long(cfg.pipeline.timeout_s * 1000)));
    if (auto a = collectives::agree(*net, stage_fields(cfg), agreed); !a)
      return fail(exit_bad_input,
                  "the stages were started with different settings: " + a.error().what());
    run = std::make_unique<pipeline::stage_runner<nn::gpt, net::asio_tcp>>(
        model, plan, opts, B, T, *net, std::uint64_t(tc.seed));
  }
  auto stats = [&] { return run ? run->stats() : pipeline::stage_stats{}; };
  auto log = io::metrics_log::open(stage_log(cfg, k));
  if (!log) return fail(exit_write_failed, log.error().what());
  std::printf("paco_train: stage %d of %d, blocks %d..%d, %s%s\n", k, plan.stages(),
              plan.begin_block(k), plan.end_block(k) - 1,
              single                                    ? "one process (plain training)"
              : opts.sched == pipeline::schedule::local ? "local losses"
                                                        : pipeline::name(opts.sched),
              k + 1 < plan.stages() && opts.sched == pipeline::schedule::local
                  ? (std::string(", head ") + pipeline::name(opts.head)).c_str()
                  : "");
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double ema = NAN;
  status write_error;
  auto on_step = [&](long t, double loss) {
    if (!std::isnan(loss)) ema = std::isnan(ema) ? loss : 0.95 * ema + 0.05 * loss;
    const auto st = stats();
    if (t % 10 != 0 && t != tc.steps) return;
    const double el = elapsed();
    if (auto w = log->write({{"step", t},
                             {"loss_bpb", std::isnan(ema) ? json() : json(ema / ln2)},
                             {"elapsed_s", el},
                             {"tokens_per_s", double(t) * B * T / el},
                             {"wait_s", st.wait_s},
                             {"bytes_sent", st.bytes_sent}});
        !w && write_error.ok())
      write_error = w;
    if (t % tc.eval_every == 0 || t == tc.steps)
      std::printf("stage %d step %ld/%ld loss %.3f bpb %.0f tok/s waited %.1f s\n", k, t, tc.steps,
                  ema / ln2, double(t) * B * T / el, st.wait_s);
  };
  status s;
  if (single) {
    for (long t = 1; t <= tc.steps; ++t) on_step(t, single->step(a, opt, sched.lr_at(t)));
  } else {
    s = pipeline::train_stage(*run, a, opt, sched, train, B, T, std::uint64_t(tc.seed), tc.steps,
                              on_step);
  }
  const double train_s = elapsed();
  if (!s) return fail(exit_link_lost, s.error().what());
  if (!write_error.ok()) return fail(exit_write_failed, write_error.error().what());
  if (run)
    if (auto g = run->gather(a); !g) return fail(exit_link_lost, g.error().what());
  const auto st = stats();
  json fin{{"final", true},
           {"stage", k},
           {"step", tc.steps},
           {"steps", tc.steps},
           {"train_s", train_s},
           {"tokens_per_s", double(tc.steps) * B * T / train_s},
           {"loss_bpb", std::isnan(ema) ? json() : json(ema / ln2)},
           {"bytes_sent", st.bytes_sent},
           {"wait_s", st.wait_s},
           {"stash_high_water", st.stash_high_water}};
  if (k == 0) {  // the whole model: the one scorer on both held-out splits
    io::byte_tokenizer tok;
    auto tokens_of = [&](io::split sp) {
      std::vector<std::vector<std::int32_t>> d;
      for (auto& doc : corpus->subset(sp).docs) d.push_back(tok.encode(doc.text));
      return d;
    };
    const auto rule = route::sliding_window::make(T).value_or_throw();
    auto ws = model.make_workspace({B, T});
    std::printf("paco_train: stage 0 scores the gathered model on validation and test...\n");
    fin["val_bpb"] = score_bpb(model, a.get(plane::param).data(), tokens_of(io::split::validation),
                               std::size_t(cfg.pipeline.eval_tokens), rule, ws);
    fin["test_bpb"] = score_bpb(model, a.get(plane::param).data(), tokens_of(io::split::test),
                                std::size_t(cfg.pipeline.eval_tokens), rule, ws);
  }
  if (auto w = log->write(fin); !w) return fail(exit_write_failed, w.error().what());
  return 0;
}

// The last record of a stage's log (empty when it has none yet).
inline json last_record(const fs::path& p) {
  std::ifstream f(p);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  if (last.empty()) return json();
  try {
    return json::parse(last);
  } catch (...) {
    return json();  // a line being written
  }
}

inline std::vector<std::string> stage_command(const std::string& config_path,
                                              const std::vector<std::string>& overrides, int k,
                                              const std::string& peers) {
  std::vector<std::string> a{"paco_train"};
  if (!config_path.empty()) a.insert(a.end(), {"--config", config_path});
  for (auto& o : overrides) a.insert(a.end(), {"--set", o});
  a.insert(a.end(), {"--role", "stage", "--stage", std::to_string(k), "--peers", peers});
  return a;
}

// The launcher of a pipeline job: see the file comment.
inline int run_pipeline_launcher(const train_config& cfg, const std::string& config_path,
                                 const std::vector<std::string>& overrides) {
  const int K = cfg.pipeline.stages;
  const fs::path dir = cfg.output.dir;
  std::vector<std::string> peers;
  for (int k = 0; k < K; ++k) {
    const std::string host = cfg.pipeline.hosts.empty() || cfg.launch.mode == "local"
                                 ? "127.0.0.1"
                                 : cfg.pipeline.hosts[std::size_t(k)];
    const int port = cfg.pipeline.base_port
                         ? cfg.pipeline.base_port + k
                         : (cfg.launch.mode == "manual" ? 29500 + k : net::free_loopback_port());
    peers.push_back(host + ":" + std::to_string(port));
  }
  std::string peers_csv;
  for (auto& p : peers) peers_csv += (peers_csv.empty() ? "" : ",") + p;
  if (cfg.launch.mode == "manual") {
    std::printf("Run one command per machine, with the same PACO_TOKEN on each:\n");
    for (int k = 0; k < K; ++k) {
      std::string line;
      for (auto& a : stage_command(config_path, overrides, k, peers_csv)) line += a + " ";
      std::printf("  %s\n", line.c_str());
    }
    return 0;
  }
  auto lock = job::run_lock::acquire(dir, "paco_train");
  if (!lock) return std::fprintf(stderr, "paco_train: %s\n", lock.error().what().c_str()), 2;
  for (int k = 0; k < K; ++k) {
    std::error_code ec;
    fs::remove(stage_log(cfg, k), ec);
    fs::remove(dir / ("stage-" + std::to_string(k) + ".log"), ec);
  }
  if (token_from_env().empty()) setenv("PACO_TOKEN", random_token().c_str(), 1);
  const auto plan = stage_plan_of(cfg);
  std::printf(
      "paco_train: pipeline of %d stages (%s), GPT d=%d layers=%d, batch %d x %d, %ld "
      "steps, logs in %s\n",
      K, cfg.pipeline.schedule.c_str(), cfg.model.d, cfg.model.layers, cfg.train.batch,
      cfg.model.ctx, cfg.train.steps, dir.c_str());
  std::vector<pid_t> pids(std::size_t(K), -1);
  std::vector<int> codes(std::size_t(K), -1);
  for (int k = 0; k < K; ++k) {
    pids[std::size_t(k)] = spawn(stage_command(config_path, overrides, k, peers_csv),
                                 dir / ("stage-" + std::to_string(k) + ".log"));
    if (pids[std::size_t(k)] < 0)
      return std::fprintf(stderr, "paco_train: cannot start stage %d\n", k), 2;
  }
  io::progress bar("pipeline", cfg.train.steps);
  int failed = -1;
  for (int running = K; running > 0;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int k = 0; k < K; ++k) {
      if (codes[std::size_t(k)] >= 0) continue;
      int st = 0;
      if (waitpid(pids[std::size_t(k)], &st, WNOHANG) != pids[std::size_t(k)]) continue;
      codes[std::size_t(k)] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      --running;
      // The stage to blame: the first that failed, unless it failed only because a neighbour
      // went (exit 3) and another failed for a reason of its own.
      const int c = codes[std::size_t(k)];
      if (c != 0 && (failed < 0 || (codes[std::size_t(failed)] == exit_link_lost &&
                                    c != exit_link_lost && c < 128))) {
        if (failed < 0)
          for (int j = 0; j < K; ++j)
            if (codes[std::size_t(j)] < 0) kill(pids[std::size_t(j)], SIGTERM);
        failed = k;
      }
    }
    long least = cfg.train.steps;
    std::string text;
    for (int k = 0; k < K; ++k) {
      const json r = last_record(stage_log(cfg, k));
      const long step = r.is_object() && r.contains("step") ? r["step"].get<long>() : 0;
      least = std::min(least, step);
      char b[96];  // a stage without a loss of its own (global backprop) shows "-"
      const bool has_loss = r.is_object() && r.contains("loss_bpb") && r["loss_bpb"].is_number();
      std::snprintf(b, sizeof b, "%s[%d] %ld ", k ? " | " : "", k, step);
      text += b;
      if (has_loss) std::snprintf(b, sizeof b, "%.2f", r["loss_bpb"].get<double>());
      text += has_loss ? b : "-";
    }
    bar.update(least, text + " bpb");
  }
  bar.finish();
  if (failed >= 0) {
    std::fprintf(stderr, "paco_train: stage %d failed (exit %d); its log %s ends:\n", failed,
                 codes[std::size_t(failed)],
                 (dir / ("stage-" + std::to_string(failed) + ".log")).c_str());
    std::ifstream f(dir / ("stage-" + std::to_string(failed) + ".log"));
    std::vector<std::string> lines;
    for (std::string l; std::getline(f, l);) lines.push_back(l);
    for (std::size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i)
      std::fprintf(stderr, "  %s\n", lines[i].c_str());
    return codes[std::size_t(failed)] > 0 && codes[std::size_t(failed)] < 128
               ? codes[std::size_t(failed)]
               : 3;
  }
  // Every stage exited 0: the table from their final records.
  std::vector<json> fin;
  for (int k = 0; k < K; ++k) {
    json r = last_record(stage_log(cfg, k));
    if (!r.is_object() || !r.value("final", false))
      return std::fprintf(stderr, "paco_train: stage %d exited 0 without its final record\n", k), 3;
    fin.push_back(r);
  }
  double train_s = 0;
  std::size_t bytes = 0;
  for (auto& r : fin) {
    train_s = std::max(train_s, r["train_s"].get<double>());
    bytes += r["bytes_sent"].get<std::size_t>();
  }
  const double tokens = double(cfg.train.steps) * cfg.train.batch * cfg.model.ctx;
  json results{{"schedule", cfg.pipeline.schedule},
               {"stages", K},
               {"head", cfg.pipeline.head},
               {"steps", cfg.train.steps},
               {"tokens", tokens},
               {"train_s", train_s},
               {"tokens_per_s", tokens / train_s},
               {"bytes_between_stages", bytes},
               {"val_bpb", fin[0]["val_bpb"]},
               {"test_bpb", fin[0]["test_bpb"]},
               {"link_mbps", cfg.pipeline.link_mbps},
               {"link_latency_ms", cfg.pipeline.link_latency_ms}};
  json heads = json::array();
  for (auto& r : fin) heads.push_back(r["loss_bpb"]);
  results["stage_loss_bpb"] = heads;
  if (auto s = io::with_retries(
          [&] { return io::write_file_atomic(dir / "results.json", results.dump(2) + "\n"); },
          write_tries);
      !s)
    return std::fprintf(stderr, "paco_train: %s\n", s.error().what().c_str()), exit_write_failed;
  io::table t({"result", "value"});
  auto row = [&](const std::string& k, const std::string& v) { t.add({k, v}); };
  std::string split;
  for (int k = 0; k < K; ++k)
    split += (k ? " + " : "") + std::to_string(plan.end_block(k) - plan.begin_block(k));
  row("model", "GPT " + io::cell(nn::gpt(cfg.model).param_count() / 1e6, 2, "M parameters"));
  row("stages (blocks each)", std::to_string(K) + " (" + split + ")");
  row("schedule", cfg.pipeline.schedule == "local"
                      ? "local losses, head " + cfg.pipeline.head + ", queue " +
                            std::to_string(cfg.pipeline.queue_depth)
                      : cfg.pipeline.schedule + ", " + std::to_string(cfg.pipeline.micro_batches) +
                            " micro-batches");
  row("steps x batch x ctx", std::to_string(cfg.train.steps) + " x " +
                                 std::to_string(cfg.train.batch) + " x " +
                                 std::to_string(cfg.model.ctx));
  row("training time", io::cell(train_s, 1, " s"));
  row("throughput", io::cell(tokens / train_s, 0, " tokens/s"));
  row("bytes between stages", io::cell(double(bytes) / 1e6, 1, " MB"));
  for (int k = 0; k < K; ++k)
    row("stage " + std::to_string(k) + " train loss (EMA)",
        fin[std::size_t(k)]["loss_bpb"].is_number()
            ? io::cell(fin[std::size_t(k)]["loss_bpb"].get<double>(), 3, " bits/byte") +
                  (k + 1 < K && cfg.pipeline.schedule == "local"
                       ? " (its " + cfg.pipeline.head + " head)"
                       : "")
            : std::string("-"));
  const std::string part = cfg.pipeline.eval_tokens
                               ? " (" + std::to_string(cfg.pipeline.eval_tokens) + " tokens)"
                               : " (whole split)";
  auto bpb_cell = [](const json& v) {  // a diverged run's score is written as null
    return v.is_number() ? io::cell(v.get<double>(), 3, " bits/byte") : std::string("nan");
  };
  row("validation" + part, bpb_cell(fin[0]["val_bpb"]));
  row("test" + part, bpb_cell(fin[0]["test_bpb"]));
  row("results", (dir / "results.json").string());
  t.print(stdout);
  return 0;
}

}  // namespace paco_train
