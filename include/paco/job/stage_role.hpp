#pragma once
// Local-loss DiPaCo (dipaco.stages = K > 1): each worker's path cut into K stages at level
// boundaries, one process per stage (--role worker --worker W --stage k --peers …). The stages of
// a worker form a pipeline over TCP ([pipeline] says how they train: local losses with auxiliary
// heads, or GPipe / 1F1B); each stage is a worker of the unchanged store with its own link,
// pulling and pushing only its own modules' Δ (train/stage_worker.hpp).
//
// Checkpoints: after every round each stage writes its state as a stage file of its worker's
// group (pipeline/stage_file.hpp; run_dir::stage_state): θ, θ_start, moments and residual of its
// modules, its auxiliary head, the readout copies in flight, its step, sampler and the round it
// completed, bound to the run, the worker and the stage. A stage cannot rejoin a pipeline that
// went on without it, so when one fails the launcher stops its worker's other stages and restarts
// them all (launcher.hpp); each resumes (--resume) from the newest step every stage of the worker
// holds (none: the start), so their steps meet again. Each runs the round loop in lockstep
// (worker_loop_options::lockstep): a round the store closed while the stages were down is trained
// again, its push dropped, so every stage takes the same steps. Its modules then carry on from
// the store's state, not bit for bit the uninterrupted run's (a pipeline job's restart is).

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "paco/collectives/agree.hpp"
#include "paco/io/metrics.hpp"
#include "paco/job/data.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/run_files.hpp"
#include "paco/job/stages.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/pipeline/stage_file.hpp"
#include "paco/store/metered.hpp"
#include "paco/store/store.hpp"
#include "paco/train/stage_worker.hpp"
#include "paco/train/worker_loop.hpp"

namespace paco::job {

// What every stage of a worker must share: the pipeline's fields, the DiPaCo run's, and the step
// the stages resume from (−1: the start).
template <nn::BlockModel Model>
std::vector<collectives::agree_field> dipaco_stage_fields(const dipaco_job<Model>& c,
                                                          long from_step) {
  // The model: its fingerprint and its shape and size (a GPT's mlp_mult shows in the latter).
  auto f = stage_fields(c, model_description(c) + " " + describe_model(c.model));
  std::string grid, split;
  for (int e : c.dipaco.grid) grid += (grid.empty() ? "" : "x") + std::to_string(e);
  for (int l : c.dipaco.stage_split) split += (split.empty() ? "" : ",") + std::to_string(l);
  f.push_back({"dipaco.grid", grid});
  f.push_back({"dipaco.stages", std::to_string(c.dipaco.stages) + " split " + split});
  f.push_back({"dipaco.rounds", std::to_string(c.dipaco.rounds)});
  f.push_back({"dipaco.inner_steps", std::to_string(c.dipaco.inner_steps)});
  f.push_back({"dipaco.compress", c.dipaco.compress});
  f.push_back({"resumed from step", std::to_string(from_step)});
  return f;
}

// How many checkpoints each stage of a worker keeps: the first stage runs at most (K − 1)·q steps
// ahead of the last with local losses (q: the queue), 1 under global backprop; rounds are H steps.
template <nn::BlockModel Model>
int stage_states_to_keep(const dipaco_job<Model>& c) {
  const long ahead =
      c.pipeline.schedule == "local" ? long(c.dipaco.stages - 1) * c.pipeline.queue_depth : 1;
  return pipeline::stage_files_to_keep(c.dipaco.inner_steps, ahead);
}

// Stage k of worker w; returns the role's exit code (job/dipaco_job.hpp). peers: every stage's
// host:port of this worker, comma-separated. resume: continue from the newest step every stage
// of the worker checkpointed (without one: from the start); fresh: delete this stage's
// checkpoints and log first.
template <nn::BlockModel Model>
int run_stage_worker(const dipaco_job<Model>& cfg, const run_dir& rd, int w, int k,
                     const std::string& peers_csv, bool resume, bool fresh) {
  auto fail = [&](int code, const std::string& m) {
    std::fprintf(stderr, "worker %d stage %d: %s\n", w, k, m.c_str());
    return code;
  };
  if (auto s = require_token("worker"); !s) return fail(exit_bad_input, s.error().what());
  if (resume && fresh) return fail(exit_bad_input, "--resume and --fresh exclude each other");
  const path::path_plan g = make_plan(cfg);
  const job_processes jp = processes_of(cfg, g);
  if (w < 1 || w > g.workers())
    return fail(exit_bad_input, "--worker must be in [1, " + std::to_string(g.workers()) + "]");
  if (k < 0 || k >= jp.K)
    return fail(exit_bad_input, "--stage must be in 0.." + std::to_string(jp.K - 1));
  const auto peers = split_peers(peers_csv);
  if (int(peers.size()) != jp.K)
    return fail(exit_bad_input, "--peers names " + std::to_string(peers.size()) +
                                    " stages, dipaco.stages is " + std::to_string(jp.K));
  const int s = jp.id(w, k), p = g.path_of_worker(w - 1);
  const fs::path log_path = rd.process_log(jp, s);
  const std::string group = run_dir::stage_group(w);
  if (fresh) {
    std::error_code ec;
    fs::remove(log_path, ec);
    for (long t : pipeline::stage_file_steps(rd.dir, k, group))
      fs::remove(rd.stage_state(w, k, t), ec);
  }
  if (!resume && (fs::exists(log_path) || !pipeline::stage_file_steps(rd.dir, k, group).empty()))
    return fail(exit_bad_input, "the run directory holds this stage's log or checkpoints (" +
                                    log_path.string() +
                                    "): pass --resume to continue it, or --fresh to start it over");
  auto data = load_job_data(cfg);
  if (!data) return fail(exit_bad_input, data.error().what());
  auto routing = read_routing(rd);
  if (!routing) return fail(exit_bad_input, routing.error().what());
  // Whose this stage's checkpoints are, and the step its worker's stages resume from: the newest
  // every one of them holds (they are all down when restarted, so the files stand still).
  const pipeline::stage_identity who{identity_of(*routing, g, w).run, k, jp.K, group};
  const std::optional<long> from =
      resume ? pipeline::newest_common_step(rd.dir, jp.K, who.run, group) : std::nullopt;
  auto shard = stream_of(*data, (*routing)["train_route"].get<std::vector<int>>(), p);
  if (shard.ids.size() <= std::size_t(cfg.model.shape().ctx) + 1)
    return fail(exit_bad_input, "path " + std::to_string(p) + " has no training documents");
  const Model& model = cfg.model;
  const auto cut = stages_of(cfg, g);
  // The pipeline of this worker's stages; every stage runs the same settings, or none runs.
  auto net = net::asio_tcp::connect(stage_link_options(cfg, k, peers));
  if (!net) return fail(exit_link_lost, "cannot join the worker's stages: " + net.error().what());
  collectives::collective_options agreed;
  agreed.until = net::after(std::chrono::milliseconds(long(cfg.pipeline.timeout_s * 1000)));
  if (auto a = collectives::agree(**net, dipaco_stage_fields(cfg, from.value_or(-1)), agreed); !a) {
    const auto [code, why] = stage_agreement_failure(a.error());
    return fail(code, why);
  }
  // Every stage agreed on a checkpoint of the last round: nothing left to train, and the store
  // may have finished and gone (a finished run resumed), so none connects to it.
  if (from && *from >= long(cfg.dipaco.rounds) * cfg.dipaco.inner_steps) {
    std::printf("worker %d stage %d: every round is done (step %ld)\n", w, k, *from);
    return 0;
  }
  const auto& tc = cfg.train;
  const train::inner_config icfg{
      .batch = tc.batch,
      .ctx = cfg.model.shape().ctx,
      .steps = cfg.dipaco.inner_steps,
      .grad_clip = tc.grad_clip,
      .schedule = {.lr = tc.lr,
                   .min_lr = tc.min_lr,
                   .warmup = tc.warmup,
                   .total = long(cfg.dipaco.rounds) * cfg.dipaco.inner_steps}};
  const optim::adamw opt{
      .lr = tc.lr, .beta1 = tc.beta1, .beta2 = tc.beta2, .weight_decay = tc.weight_decay};
  // Every stage of worker w samples the batches worker w would (the same shard and seed).
  const std::uint64_t seed = std::uint64_t(tc.seed) * 1000 + std::uint64_t(w) * 7;
  // A stage whose modules' round closed early waits for its neighbour's first activation of the
  // next round while that neighbour's round closes (up to two round deadlines and the pulls'
  // retries): the pipeline's waits cover that too.
  auto popts = pipeline_options_of(cfg);
  popts.timeout = std::max(
      popts.timeout, std::chrono::milliseconds(long(cfg.launch.round_timeout_s * 4000) + 10000));
  auto worker = train::make_stage_worker(s, model, g, p, cut, **net, popts, opt, icfg, shard, seed);
  const auto comp = compression_of(cfg);
  if (comp.spec.kind != compress::codec_kind::identity) {
    std::vector<path::level_span> lv;
    for (int l : cut.levels_of(k)) lv.push_back(g.level(l));
    auto c = store::make_codecs(comp, model, lv);
    if (!c) return fail(exit_bad_input, c.error().what());
    if (auto st = worker->set_codecs(std::move(*c)); !st)
      return fail(exit_bad_input, st.error().what());
  }
  // Resume: the stage's state of step `from`; its log keeps the records up to that step.
  const std::string config = config_fingerprint(cfg);
  const auto parts = pipeline::parts_of(worker->loop().runner());
  long completed = -1;
  std::size_t bytes_before = 0;
  if (from) {
    const fs::path file = rd.stage_state(w, k, *from);
    auto r = pipeline::load_stage_file(file, model, worker->state(), parts, config, who);
    if (!r) return fail(exit_bad_input, "cannot resume: " + r.error().what());
    // Its round and bytes: whole numbers, the round the one its step ends ((round + 1)·H).
    const auto number = [&](const char* key) -> std::optional<long> {
      const std::string v = r->metadata[key];
      if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), ::isdigit))
        return std::nullopt;
      return std::stol(v);
    };
    const auto round = number("round"), bytes = number("bytes_sent");
    if (!round || !bytes || (*round + 1) * cfg.dipaco.inner_steps != r->at.step)
      return fail(exit_bad_input, "cannot resume: '" + file.string() +
                                      "' records no valid round and bytes_sent for its step " +
                                      std::to_string(r->at.step));
    completed = *round;
    bytes_before = std::size_t(*bytes);
    if (auto st = worker->loop().seek({r->at.step, r->at.sampler}, std::move(r->in_flight)); !st)
      return fail(exit_bad_input, st.error().what());
  }
  if (resume)
    if (auto st = io::keep_records(log_path,
                                   [&](const json& j) {
                                     return j.contains("step") && j["step"].is_number_integer() &&
                                            j["step"].template get<long>() <= from.value_or(0);
                                   });
        !st)
      return fail(exit_write_failed, st.error().what());
  auto log = io::metrics_log::open(log_path, true);
  if (!log) return fail(exit_write_failed, log.error().what());
  const int port = port_of(cfg, *routing, s);
  auto link = net::asio_tcp::connect(link_options(cfg, s, port, 1, token_from_env()));
  if (!link)
    return fail(link.error().code == errc::auth ? exit_bad_input : exit_link_lost,
                link.error().what());
  store::client<net::asio_tcp> client(
      std::map<int, store::worker_link<net::asio_tcp>>{{0, {link->get(), 0}}},
      store::store_layout{{0}}, s);
  if (auto st = client.hello(); !st) return fail(exit_link_lost, st.error().what());
  std::string levels;
  for (int l : cut.levels_of(k)) levels += (levels.empty() ? "" : ",") + std::to_string(l);
  if (from)
    std::printf("worker %d stage %d: resumed from step %ld (round %ld)\n", w, k, *from, completed);
  std::printf(
      "worker %d stage %d of %d: path %s, levels %s (modules pushed as store worker %d), %s\n", w,
      k, jp.K, g.path_name(p).c_str(), levels.c_str(), s,
      pipeline_options_of(cfg).sched == pipeline::schedule::local
          ? (k + 1 < jp.K ? ("local losses, head " + cfg.pipeline.head).c_str()
                          : "local losses, the model's own head")
          : cfg.pipeline.schedule.c_str());
  const double throttle = [&] {
    const auto th = parse_throttle(cfg.launch.throttle, g.workers());
    return th && th->count(w) ? th->at(w) : 1.0;
  }();
  const train::worker_loop_options lo{
      .rounds = cfg.dipaco.rounds,
      .round_deadline = std::chrono::milliseconds(long(cfg.launch.round_timeout_s * 2000)),
      .pull_tries = int(cfg.launch.round_timeout_s * 20) + 50,
      .completed = completed,
      .throttle = throttle,
      .lockstep = true};
  store::metered metered(client);
  long late = 0;
  bool write_failed = false;
  const int keep = stage_states_to_keep(cfg);
  const auto on_round = [&](const train::worker_round& r) -> status {
    const auto& st = worker->loop().runner().stats();
    const long step = worker->inner_step();
    const std::size_t sent = bytes_before + client.bytes_sent();
    // The checkpoint of this round, then its record: a record is never ahead of a checkpoint.
    status ws = io::with_retries(
        [&] {
          return pipeline::save_stage_file(
              rd.stage_state(w, k, step), model, worker->state(), parts,
              worker->loop().runner().readouts_in_flight(), {step, worker->loop().where().sampler},
              config, who,
              {{"round", std::to_string(r.round)}, {"bytes_sent", std::to_string(sent)}});
        },
        write_tries);
    if (ws) pipeline::prune_stage_files(rd.dir, k, keep, group);
    if (ws)
      ws = io::with_retries(
          [&] {
            return log->write({{"worker", w},
                               {"stage", k},
                               {"path", p},
                               {"round", r.round},
                               {"loss", std::isnan(r.loss) ? json() : json(r.loss)},
                               {"bpb", std::isnan(r.loss) ? json() : json(r.loss / ln2)},
                               {"step", step},
                               {"pushed", r.pushed},
                               {"bytes_sent", sent},
                               {"activation_bytes", st.bytes_sent},
                               {"wait_s", st.wait_s},
                               {"codec", comp.name()},
                               {"round_s", r.seconds},
                               {"sync_s", r.sync_s},
                               {"late", late}});
          },
          write_tries);
    write_failed = !ws;
    return ws;
  };
  const auto on_refused = [&](const error& e) {
    ++late;
    std::fprintf(stderr, "worker %d stage %d: %s; continuing with the next round\n", w, k,
                 e.what().c_str());
  };
  if (auto st = train::run_worker(*worker, metered, lo, on_round, on_refused); !st) {
    // A store behind this stage's checkpoint stays behind however often it is restarted.
    const bool behind = completed >= 0 && worker->round() <= completed;
    return fail(write_failed ? exit_write_failed
                : behind     ? exit_bad_input
                             : exit_link_lost,
                st.error().what());
  }
  // Every stage of the worker is done before any closes its links.
  if (auto st = worker->loop().close(); !st) return fail(exit_link_lost, st.error().what());
  client.bye();
  (*link)->close();
  return 0;
}

}  // namespace paco::job
