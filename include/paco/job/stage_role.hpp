#pragma once
// Local-loss DiPaCo (dipaco.stages = K > 1): each worker's path cut into K stages at level
// boundaries, one process per stage (--role worker --worker W --stage k --peers …). The stages of
// a worker form a pipeline over TCP ([pipeline] says how they train: local losses with auxiliary
// heads, or GPipe / 1F1B); each stage is a worker of the unchanged store with its own link,
// pulling and pushing only its own modules' Δ (train/stage_worker.hpp).
//
// A stage keeps no checkpoint (its auxiliary head and queue cannot rejoin a pipeline that went
// on without it): a failed stage fails the run, which the launcher does not restart.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "paco/collectives/agree.hpp"
#include "paco/io/metrics.hpp"
#include "paco/job/data.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/run_files.hpp"
#include "paco/job/stages.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/store/metered.hpp"
#include "paco/store/store.hpp"
#include "paco/train/stage_worker.hpp"
#include "paco/train/worker_loop.hpp"

namespace paco::job {

// What every stage of a worker must share: the pipeline's fields and the DiPaCo run's.
template <nn::BlockModel Model>
std::vector<collectives::agree_field> dipaco_stage_fields(const dipaco_job<Model>& c) {
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
  return f;
}

// Stage k of worker w; returns the role's exit code (job/dipaco_job.hpp). peers: every stage's
// host:port of this worker, comma-separated.
template <nn::BlockModel Model>
int run_stage_worker(const dipaco_job<Model>& cfg, const run_dir& rd, int w, int k,
                     const std::string& peers_csv, bool resume, bool fresh) {
  auto fail = [&](int code, const std::string& m) {
    std::fprintf(stderr, "worker %d stage %d: %s\n", w, k, m.c_str());
    return code;
  };
  if (auto s = require_token("worker"); !s) return fail(exit_bad_input, s.error().what());
  if (resume)
    return fail(exit_bad_input,
                "the stages of a path keep no checkpoints, so they cannot --resume: start the "
                "run over (the launcher's --fresh)");
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
  if (fresh) {
    std::error_code ec;
    fs::remove(log_path, ec);
  }
  if (fs::exists(log_path))
    return fail(exit_bad_input, "the run directory holds this stage's log (" + log_path.string() +
                                    "): pass --fresh to start it over");
  auto data = load_job_data(cfg);
  if (!data) return fail(exit_bad_input, data.error().what());
  auto routing = read_routing(rd);
  if (!routing) return fail(exit_bad_input, routing.error().what());
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
  if (auto a = collectives::agree(**net, dipaco_stage_fields(cfg), agreed); !a)
    return fail(exit_bad_input,
                "the stages were started with different settings: " + a.error().what());
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
      .throttle = throttle};
  store::metered metered(client);
  long late = 0;
  bool write_failed = false;
  const auto on_round = [&](const train::worker_round& r) -> status {
    const auto& st = worker->loop().runner().stats();
    status ws = io::with_retries(
        [&] {
          return log->write({{"worker", w},
                             {"stage", k},
                             {"path", p},
                             {"round", r.round},
                             {"loss", std::isnan(r.loss) ? json() : json(r.loss)},
                             {"bpb", std::isnan(r.loss) ? json() : json(r.loss / ln2)},
                             {"step", worker->inner_step()},
                             {"bytes_sent", client.bytes_sent()},
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
  if (auto st = train::run_worker(*worker, metered, lo, on_round, on_refused); !st)
    return fail(write_failed ? exit_write_failed : exit_link_lost, st.error().what());
  // Every stage of the worker is done before any closes its links.
  if (auto st = worker->loop().close(); !st) return fail(exit_link_lost, st.error().what());
  client.bye();
  (*link)->close();
  return 0;
}

}  // namespace paco::job
