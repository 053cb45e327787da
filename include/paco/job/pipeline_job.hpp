#pragma once
// The pipeline job (a program's job.mode = "pipeline"): the job's model cut into pipeline.stages
// stages of contiguous blocks, one process per stage over TCP, trained with local losses (Laskin
// et al.: an auxiliary head per stage, activations forward only) or with global backprop as
// GPipe or 1F1B (docs/pipeline.md). The library's pipeline (include/paco/pipeline/) does the
// work; these are the job's two roles, beside the DiPaCo job's (launcher.hpp):
//
//   run_pipeline_launcher  spawns one `--role stage --stage k --peers …` process per stage on
//             this machine (the program's child_args, as the DiPaCo launcher does), shows every
//             stage's progress, and prints the results table; launch.mode = "manual" prints the
//             stage commands for the machines of pipeline.hosts instead.
//   run_pipeline_stage    one stage: connects to its neighbours (PACO_TOKEN authenticates every
//             link), trains train.steps steps, logs every 10th step to
//             <output.dir>/stage-<k>.jsonl; stage 0 gathers the whole model and scores
//             validation and test with the one scorer (route::score_bpb; its log's final
//             record); the launcher writes <output.dir>/results.json.
//
// Checkpoints: every train.checkpoint_every steps each stage writes its state
// (pipeline/stage_file.hpp) bound to the run (<output.dir>/pipeline.json's run_id, PACO_RUN_ID in
// the stages' environment). A stage that stops for a reason a restart can mend (restartable(),
// the DiPaCo launcher's rule) makes the launcher restart every stage from the newest step all of
// them hold (--from-step), up to launch.restarts times; `--resume` continues a run from there,
// `--fresh` starts over. The restarted run is the uninterrupted one bit for bit.
//
// Exit codes (dipaco_job.hpp): 0 done; 2 bad input; 3 a neighbour was lost or silent past
// pipeline.timeout_s; 4 a file could not be written.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "paco/collectives/agree.hpp"
#include "paco/core/hash.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/metrics.hpp"
#include "paco/io/progress.hpp"
#include "paco/io/table.hpp"
#include "paco/io/tokenizer.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/launcher.hpp"
#include "paco/job/run_lock.hpp"
#include "paco/job/stages.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/free_port.hpp"
#include "paco/pipeline/pipeline.hpp"
#include "paco/pipeline/stage_file.hpp"
#include "paco/route/evaluate.hpp"
#include "paco/train/inner_loop.hpp"

namespace paco::job {

// The cut of the job's model into pipeline.stages stages (pipeline.split's boundaries, or equal).
template <nn::BlockModel Model>
pipeline::stage_plan stage_plan_of(const dipaco_job<Model>& c) {
  const int blocks = c.model.blocks();
  return (c.pipeline.split.empty() ? pipeline::stage_plan::equal(blocks, c.pipeline.stages)
                                   : pipeline::stage_plan::at(c.pipeline.split, blocks))
      .value_or_throw();
}

inline fs::path stage_log(const settings& c, int k) {
  return fs::path(c.output.dir) / ("stage-" + std::to_string(k) + ".jsonl");
}

// What every stage of a run must share (stage_fields, with the model's description).
template <nn::BlockModel Model>
std::vector<collectives::agree_field> pipeline_stage_fields(const dipaco_job<Model>& c) {
  return stage_fields(c, model_description(c) + " " + describe_model(c.model));
}

// The run's identity (stage_identity::run): the launcher's, from the environment (PACO_RUN_ID;
// empty: the stage keeps no checkpoints).
inline std::string run_id_from_env() {
  const char* id = std::getenv("PACO_RUN_ID");
  return id ? std::string(id) : std::string();
}

// One stage's process; returns its exit code. peers: every stage's host:port, comma-separated.
// from_step ≥ 0: resume from this stage's checkpoint of that step (every stage resumes from the
// same step).
template <nn::BlockModel Model>
int run_pipeline_stage(const dipaco_job<Model>& cfg, int k, const std::string& peers_csv,
                       long from_step = -1) {
  const char* P = cfg.program.c_str();
  auto fail = [&](int code, const std::string& m) {
    std::fprintf(stderr, "%s (stage %d): %s\n", P, k, m.c_str());
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
  const Model& model = cfg.model;
  arena<host> a(model.layout());
  model.init(a, std::uint64_t(cfg.train.seed));
  const auto plan = stage_plan_of(cfg);
  const auto opts = pipeline_options_of(cfg);
  const int B = cfg.train.batch, T = cfg.model.shape().ctx;
  const auto& tc = cfg.train;
  const optim::adamw opt{
      .lr = tc.lr, .beta1 = tc.beta1, .beta2 = tc.beta2, .weight_decay = tc.weight_decay};
  const optim::warmup_cosine sched{
      .lr = tc.lr, .min_lr = tc.min_lr, .warmup = tc.warmup, .total = tc.steps};
  // One stage is plain training (bit for bit, tests/pipeline): the one inner loop, on
  // train.threads cores, over the same batches.
  std::unique_ptr<net::asio_tcp> net;
  std::unique_ptr<pipeline::stage_loop<Model, net::asio_tcp>> loop;
  std::optional<train::inner_loop<Model, optim::adamw>> single;
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
    if (auto a = collectives::agree(*net, pipeline_stage_fields(cfg), agreed); !a) {
      const auto [code, why] = stage_agreement_failure(a.error());
      return fail(code, why);
    }
    loop = std::make_unique<pipeline::stage_loop<Model, net::asio_tcp>>(
        model, plan, opts, B, T, sched, *net, train, std::uint64_t(tc.seed));
  }
  auto stats = [&] { return loop ? loop->runner().stats() : pipeline::stage_stats{}; };
  // Checkpoints: every train.checkpoint_every steps, bound to the run (PACO_RUN_ID) and stage.
  const std::string run_id = run_id_from_env();
  const pipeline::stage_identity who{run_id, k, plan.stages()};
  const auto fields = pipeline_stage_fields(cfg);
  const std::string config = collectives::join_fields(fields);
  const pipeline::stage_parts parts =
      loop ? pipeline::parts_of(loop->runner())
           : pipeline::stage_parts{{0, model.layout().total()}, nullptr, {}};
  const long ahead =
      opts.sched == pipeline::schedule::local ? long(plan.stages() - 1) * opts.queue_depth : 1;
  const int keep = pipeline::stage_files_to_keep(tc.checkpoint_every, ahead);
  if (from_step >= 0) {
    if (run_id.empty())
      return fail(exit_bad_input, "--from-step needs the run's PACO_RUN_ID (the launcher's)");
    const fs::path file = fs::path(cfg.output.dir) / pipeline::stage_file_name(k, from_step);
    auto r = pipeline::load_stage_file(file, model, a, parts, config, who);
    if (!r) return fail(exit_bad_input, "cannot resume: " + r.error().what());
    if (r->at.step != from_step)
      return fail(exit_bad_input, "cannot resume: '" + file.string() + "' records step " +
                                      std::to_string(r->at.step));
    if (loop) {
      if (auto s = loop->seek({from_step, r->at.sampler}, std::move(r->in_flight)); !s)
        return fail(exit_bad_input, s.error().what());
    } else {
      single->seek({from_step, r->at.sampler});
    }
    std::printf("%s: stage %d resumed from %s\n", P, k, file.c_str());
  }
  auto checkpoint = [&](long t) -> status {
    if (run_id.empty() || t % tc.checkpoint_every != 0 || t == tc.steps) return {};
    const fs::path dir = cfg.output.dir;
    const pipeline::stage_position at{t, loop ? loop->where().sampler : single->where().sampler};
    const auto in_flight =
        loop ? loop->runner().readouts_in_flight() : std::vector<pipeline::readout_copy>{};
    if (auto s = io::with_retries(
            [&] {
              return pipeline::save_stage_file(dir / pipeline::stage_file_name(k, t), model, a,
                                               parts, in_flight, at, config, who);
            },
            write_tries);
        !s)
      return s;
    pipeline::prune_stage_files(dir, k, keep);
    return {};
  };
  auto log = io::metrics_log::open(stage_log(cfg, k), from_step >= 0);
  if (!log) return fail(exit_write_failed, log.error().what());
  std::printf("%s: stage %d of %d, blocks %d..%d, %s%s\n", P, k, plan.stages(), plan.begin_block(k),
              plan.end_block(k) - 1,
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
                             {"tokens_per_s", double(t - std::max(0L, from_step)) * B * T / el},
                             {"wait_s", st.wait_s},
                             {"bytes_sent", st.bytes_sent}});
        !w && write_error.ok())
      write_error = w;
    if (t % tc.eval_every == 0 || t == tc.steps)
      std::printf("stage %d step %ld/%ld loss %.3f bpb %.0f tok/s waited %.1f s\n", k, t, tc.steps,
                  ema / ln2, double(t - std::max(0L, from_step)) * B * T / el, st.wait_s);
  };
  status s, saved;
  auto after_step = [&](long t, double loss) -> status {
    on_step(t, loss);
    saved = checkpoint(t);
    return saved;
  };
  const long from = std::max(0L, from_step);
  if (single) {
    for (long t = from + 1; t <= tc.steps && saved.ok(); ++t)
      after_step(t, single->step(a, opt, sched.lr_at(t)));
  } else {
    s = loop->train(a, opt, tc.steps, after_step);
  }
  const double train_s = elapsed();
  if (!saved) return fail(exit_write_failed, "cannot write a checkpoint: " + saved.error().what());
  if (!s) return fail(exit_link_lost, s.error().what());
  if (!write_error.ok()) return fail(exit_write_failed, write_error.error().what());
  if (loop)
    if (auto g = loop->runner().gather(a); !g) return fail(exit_link_lost, g.error().what());
  const auto st = stats();
  json fin{{"final", true},
           {"stage", k},
           {"step", tc.steps},
           {"steps", tc.steps},
           {"train_s", train_s},
           {"tokens_per_s", double(tc.steps - from) * B * T / train_s},
           {"resumed_from", from},
           {"loss_bpb", std::isnan(ema) ? json() : json(ema / ln2)},
           {"bytes_sent", st.bytes_sent},
           {"wait_s", st.wait_s},
           {"stash_high_water", st.stash_high_water}};
  if (k == 0) {  // the whole model: its hash, and the one scorer on both held-out splits
    const auto th = a.get(plane::param);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(hash64(th.data(), th.size_bytes())));
    fin["theta_hash"] = hex;
    io::byte_tokenizer tok;
    auto tokens_of = [&](io::split sp) {
      std::vector<std::vector<std::int32_t>> d;
      for (auto& doc : corpus->subset(sp).docs) d.push_back(tok.encode(doc.text));
      return d;
    };
    const auto rule = route::sliding_window::make(T).value_or_throw();
    auto ws = model.make_workspace({B, T});
    std::printf("%s: stage 0 scores the gathered model on validation and test...\n", P);
    fin["val_bpb"] =
        route::score_bpb(model, a.get(plane::param).data(), tokens_of(io::split::validation),
                         std::size_t(cfg.pipeline.eval_tokens), rule, ws);
    fin["test_bpb"] =
        route::score_bpb(model, a.get(plane::param).data(), tokens_of(io::split::test),
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

// Stage k's command line: the program, its child_args, the stage's role and flags.
template <nn::BlockModel Model>
std::vector<std::string> stage_command(const dipaco_job<Model>& cfg, int k,
                                       const std::string& peers, long from_step = -1) {
  std::vector<std::string> a{cfg.program};
  a.insert(a.end(), cfg.child_args.begin(), cfg.child_args.end());
  a.insert(a.end(), {"--role", "stage", "--stage", std::to_string(k), "--peers", peers});
  if (from_step >= 0) a.insert(a.end(), {"--from-step", std::to_string(from_step)});
  return a;
}

// The run's identity file: <output.dir>/pipeline.json {"run_id": …}, written when a run starts.
inline fs::path pipeline_run_file(const settings& c) {
  return fs::path(c.output.dir) / "pipeline.json";
}
inline result<std::string> read_run_id(const settings& c) {
  const fs::path f = pipeline_run_file(c);
  std::ifstream in(f);
  if (!in)
    return error(errc::not_found,
                 "'" + f.string() + "' is missing: no pipeline run to resume there");
  try {
    const json j = json::parse(in);
    if (j.contains("run_id") && j["run_id"].is_string() && !j["run_id"].get<std::string>().empty())
      return j["run_id"].get<std::string>();
  } catch (const std::exception&) {
  }
  return error(errc::corrupt, "'" + f.string() + "' records no run_id");
}

// What a pipeline run leaves in its directory: logs, checkpoints, results.
inline std::vector<fs::path> pipeline_run_files(const settings& c) {
  std::vector<fs::path> out;
  const fs::path dir = c.output.dir;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if ((n.starts_with("stage-") &&
         (n.ends_with(".jsonl") || n.ends_with(".log") || n.ends_with(".safetensors"))) ||
        n == "results.json" || n == "pipeline.json")
      out.push_back(it->path());
  }
  return out;
}

// The stages' host:port (local runs: free loopback ports, drawn again at each start).
inline std::string pipeline_peers(const settings& cfg) {
  std::string csv;
  for (int k = 0; k < cfg.pipeline.stages; ++k) {
    const std::string host = cfg.pipeline.hosts.empty() || cfg.launch.mode == "local"
                                 ? "127.0.0.1"
                                 : cfg.pipeline.hosts[std::size_t(k)];
    const int port = cfg.pipeline.base_port
                         ? cfg.pipeline.base_port + k
                         : (cfg.launch.mode == "manual" ? 29500 + k : net::free_loopback_port());
    csv += (csv.empty() ? "" : ",") + host + ":" + std::to_string(port);
  }
  return csv;
}

// The launcher of a pipeline job: see the file comment. resume: continue the run in output.dir
// from the newest step every stage checkpointed; fresh: start over where a run left files.
template <nn::BlockModel Model>
int run_pipeline_launcher(const dipaco_job<Model>& cfg, bool resume = false, bool fresh = false) {
  const char* P = cfg.program.c_str();
  const int K = cfg.pipeline.stages;
  const fs::path dir = cfg.output.dir;
  auto bad = [P](const std::string& m) {
    std::fprintf(stderr, "%s: %s\n", P, m.c_str());
    return exit_bad_input;
  };
  if (resume && fresh) return bad("--resume or --fresh, not both");
  std::optional<run_lock> lock;
  if (cfg.launch.mode != "manual") {
    auto l = run_lock::acquire(dir, cfg.program);
    if (!l) return bad(l.error().what());
    lock.emplace(std::move(*l));
  }
  // The run's identity and where it starts: a new run, or the newest step every stage holds.
  std::string run_id;
  long from = -1;
  if (resume) {
    auto id = read_run_id(cfg);
    if (!id) return bad("cannot resume: " + id.error().what());
    run_id = *id;
    const auto c = pipeline::newest_common_step(dir, K, run_id);
    if (!c)
      return bad("cannot resume: no step for which every stage of run " + run_id +
                 " holds a checkpoint in " + dir.string() +
                 " (stages write one every train.checkpoint_every steps); start over with --fresh");
    from = *c;
  } else {
    const auto old = pipeline_run_files(cfg);
    if (!old.empty() && !fresh)
      return bad(dir.string() + " holds a previous pipeline run (" +
                 old.front().filename().string() + ", " + std::to_string(old.size()) +
                 " files): --resume to continue it, --fresh to start over");
    std::error_code ec;
    for (auto& f : old) fs::remove(f, ec);
    fs::create_directories(dir, ec);
    run_id = random_token().substr(0, 16);
    if (auto s =
            io::write_file_atomic(pipeline_run_file(cfg), json{{"run_id", run_id}}.dump() + "\n");
        !s)
      return std::fprintf(stderr, "%s: %s\n", P, s.error().what().c_str()), exit_write_failed;
  }
  setenv("PACO_RUN_ID", run_id.c_str(), 1);
  if (cfg.launch.mode == "manual") {
    std::printf(
        "Run one command per machine, with the same PACO_TOKEN and PACO_RUN_ID=%s on "
        "each%s:\n",
        run_id.c_str(), from >= 0 ? (" (from step " + std::to_string(from) + ")").c_str() : "");
    const std::string peers_csv = pipeline_peers(cfg);
    for (int k = 0; k < K; ++k) {
      std::string line;
      for (auto& a : stage_command(cfg, k, peers_csv, from)) line += a + " ";
      std::printf("  %s\n", line.c_str());
    }
    return 0;
  }
  // The stages' ports before any stage starts: one held by another process is an error naming it.
  for (int k = 0; k < K && cfg.pipeline.base_port > 0; ++k)
    if (auto s = net::port_available("127.0.0.1", cfg.pipeline.base_port + k); !s)
      return bad("port " + std::to_string(cfg.pipeline.base_port + k) + " (stage " +
                 std::to_string(k) +
                 "'s link, pipeline.base_port) cannot be listened on: " + s.error().message);
  if (token_from_env().empty()) setenv("PACO_TOKEN", random_token().c_str(), 1);
  const auto plan = stage_plan_of(cfg);
  std::printf(
      "%s: pipeline of %d stages (%s), model d=%d blocks=%d, batch %d x %d, %ld steps, logs "
      "in %s%s\n",
      P, K, cfg.pipeline.schedule.c_str(), cfg.model.shape().d, cfg.model.blocks(), cfg.train.batch,
      cfg.model.shape().ctx, cfg.train.steps, dir.c_str(),
      from >= 0 ? (", resumed from step " + std::to_string(from)).c_str() : "");
  std::vector<pid_t> pids(std::size_t(K), -1);
  std::vector<int> codes(std::size_t(K), -1);
  std::vector<bool> stopped(std::size_t(K), false);  // SIGTERMed by the launcher
  auto start_all = [&]() -> bool {
    const std::string peers_csv = pipeline_peers(cfg);
    for (int k = 0; k < K; ++k) {
      codes[std::size_t(k)] = -1;
      stopped[std::size_t(k)] = false;
      pids[std::size_t(k)] = spawn(stage_command(cfg, k, peers_csv, from),
                                   dir / ("stage-" + std::to_string(k) + ".log"));
      if (pids[std::size_t(k)] < 0) return false;
    }
    return true;
  };
  if (!start_all()) return std::fprintf(stderr, "%s: cannot start the stages\n", P), 2;
  int restarts = 0;
  io::progress bar("pipeline", cfg.train.steps);
  int failed = -1;
  for (int running = K;;) {
    if (running == 0) {
      // A stage that failed for a reason a restart can mend (killed, its neighbour lost: not bad
      // input, not a file it cannot write) restarts the whole pipeline, within launch.restarts,
      // from the newest step every stage checkpointed (from the start when there is none).
      const int c = failed < 0 ? 0 : codes[std::size_t(failed)];
      if (failed < 0 || !restartable(c) || restarts >= cfg.launch.restarts) break;
      ++restarts;
      from = pipeline::newest_common_step(dir, K, run_id).value_or(-1);
      std::fprintf(stderr,
                   "\n%s: stage %d stopped (exit %d); restarting the pipeline from %s "
                   "(%d of %d)\n",
                   P, failed, c, from >= 0 ? ("step " + std::to_string(from)).c_str() : "the start",
                   restarts, cfg.launch.restarts);
      if (!start_all()) return std::fprintf(stderr, "%s: cannot start the stages\n", P), 2;
      failed = -1;
      running = K;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<int> exited;
    for (int k = 0; k < K; ++k) {
      if (codes[std::size_t(k)] >= 0) continue;
      int st = 0;
      if (waitpid(pids[std::size_t(k)], &st, WNOHANG) != pids[std::size_t(k)]) continue;
      codes[std::size_t(k)] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      exited.push_back(k);
      --running;
    }
    // The stage to blame: the first that failed, unless it failed only because a neighbour went
    // (exit 3) and another failed for a reason of its own (not the SIGTERM sent here); those
    // that exited since the last look are judged together, so the order they are reaped in
    // does not matter.
    const bool had = failed >= 0;
    for (int k : exited) {
      const int c = codes[std::size_t(k)];
      if (c != 0 && (failed < 0 || (codes[std::size_t(failed)] == exit_link_lost &&
                                    c != exit_link_lost && !stopped[std::size_t(k)])))
        failed = k;
    }
    if (!had && failed >= 0)
      for (int j = 0; j < K; ++j)
        if (codes[std::size_t(j)] < 0)
          kill(pids[std::size_t(j)], SIGTERM), stopped[std::size_t(j)] = true;
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
    const fs::path log = dir / ("stage-" + std::to_string(failed) + ".log");
    std::fprintf(stderr, "%s: stage %d failed (exit %d), see %s\n", P, failed,
                 codes[std::size_t(failed)], log.c_str());
    print_log_tail(log);
    return codes[std::size_t(failed)] > 0 && codes[std::size_t(failed)] < 128
               ? codes[std::size_t(failed)]
               : 3;
  }
  // Every stage exited 0: the table from their final records.
  std::vector<json> fin;
  for (int k = 0; k < K; ++k) {
    json r = last_record(stage_log(cfg, k));
    if (!r.is_object() || !r.value("final", false))
      return std::fprintf(stderr, "%s: stage %d exited 0 without its final record\n", P, k), 3;
    fin.push_back(r);
  }
  double train_s = 0;
  std::size_t bytes = 0;
  for (auto& r : fin) {
    train_s = std::max(train_s, r["train_s"].get<double>());
    bytes += r["bytes_sent"].get<std::size_t>();
  }
  // Throughput and bytes count what the stages did since their last start (a resumed run's
  // steps after the step it resumed from).
  const long resumed_from = fin[0].value("resumed_from", 0L);
  const int T = cfg.model.shape().ctx;
  const double tokens = double(cfg.train.steps) * cfg.train.batch * T;
  const double tokens_run = double(cfg.train.steps - resumed_from) * cfg.train.batch * T;
  json results{{"schedule", cfg.pipeline.schedule},
               {"stages", K},
               {"head", cfg.pipeline.head},
               {"steps", cfg.train.steps},
               {"tokens", tokens},
               {"train_s", train_s},
               {"tokens_per_s", tokens_run / train_s},
               {"resumed_from", resumed_from},
               {"restarts", restarts},
               {"theta_hash", fin[0].value("theta_hash", "")},
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
    return std::fprintf(stderr, "%s: %s\n", P, s.error().what().c_str()), exit_write_failed;
  io::table t({"result", "value"});
  auto row = [&](const std::string& k, const std::string& v) { t.add({k, v}); };
  std::string split;
  for (int k = 0; k < K; ++k)
    split += (k ? " + " : "") + std::to_string(plan.end_block(k) - plan.begin_block(k));
  row("model", io::cell(cfg.model.param_count() / 1e6, 2, "M parameters"));
  row("stages (blocks each)", std::to_string(K) + " (" + split + ")");
  row("schedule", cfg.pipeline.schedule == "local"
                      ? "local losses, head " + cfg.pipeline.head + ", queue " +
                            std::to_string(cfg.pipeline.queue_depth)
                      : cfg.pipeline.schedule + ", " + std::to_string(cfg.pipeline.micro_batches) +
                            " micro-batches");
  row("steps x batch x ctx", std::to_string(cfg.train.steps) + " x " +
                                 std::to_string(cfg.train.batch) + " x " + std::to_string(T));
  row("training time", io::cell(train_s, 1, " s"));
  row("throughput", io::cell(tokens_run / train_s, 0, " tokens/s"));
  if (resumed_from > 0 || restarts > 0)
    row("resumed", "from step " + std::to_string(resumed_from) + " (" + std::to_string(restarts) +
                       " restart" + (restarts == 1 ? "" : "s") + " of the pipeline)");
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

}  // namespace paco::job
