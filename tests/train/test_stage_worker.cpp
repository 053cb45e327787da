// train/stage_worker.hpp: DiPaCo paths cut across processes at their levels, each stage a worker
// of the unchanged module store. Local losses are bit-identical to a one-process reference of the
// same maths (pipeline::local_reference on the whole path, pushes made by hand); one stage, or
// global backprop with one micro-batch, is plain DiPaCo (train::path_worker) bit for bit; a stage
// that goes away is an error on its neighbour within the deadline, never a hang.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "paco/io/batches.hpp"
#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/pipeline/pipeline.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/dipaco_local.hpp"
#include "paco/train/stage_worker.hpp"
#include "paco/train/worker_loop.hpp"

using namespace paco;

namespace {

constexpr int rounds = 3, H = 4;
const optim::adamw adam{.lr = 3e-3f, .weight_decay = 0.1f};
const train::inner_config stage_icfg{
    .batch = 2,
    .ctx = 16,
    .steps = H,
    .grad_clip = 1.0f,
    .schedule = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup = 2, .total = rounds * H}};
const outer::nesterov outer_opt{.lr = 0.7f, .momentum = 0.9f};

// A GPT of 4 blocks in 2 levels, a grid of 1 × 2 experts: paths (0,0) and (0,1) share level 0's
// module and each has a module of its own at level 1.
struct grid_run {
  nn::gpt model{{.vocab = 64, .ctx = 16, .d = 16, .layers = 4, .heads = 2, .mlp_mult = 2}};
  arena<host> a0{model.layout()};
  std::vector<path::level_span> levels = *path::split_gpt_levels(model.layout(), 4, 2);
  path::path_plan plan = *path::path_plan::make(path::module_grid<2>::experts({1, 2}), levels);
  std::vector<io::token_stream> shards{testing::synthetic_stream(11, 4000, 5, 3, 64),
                                       testing::synthetic_stream(12, 6000, 7, 3, 64)};
  grid_run() { model.init(a0, 5); }
  std::uint64_t seed(int p) const { return 30u + std::uint64_t(p); }
  std::unique_ptr<store::local_store<outer::nesterov>> make_store() const {
    auto s = std::make_unique<store::local_store<outer::nesterov>>(
        plan.module_table(), outer_opt, outer::delta_options{.weight_by_shard = true});
    train::init_modules(*s, plan, a0.get(plane::param).data());
    return s;
  }
};

std::vector<std::vector<float>> modules_of(const store::module_store<outer::nesterov>& s) {
  std::vector<std::vector<float>> out;
  for (int m = 0; m < s.module_count(); ++m) {
    out.emplace_back(s.info(m).size);
    s.pull(m, out.back());
  }
  return out;
}

// Every path cut into K stages, each stage a thread with a worker of its own (store id
// p·K + k), over one inproc world per path; `rounds` blocking rounds. Returns each stage's error.
std::vector<status> run_stages(
    grid_run& g, store::local_store<outer::nesterov>& store, int K,
    const pipeline::pipeline_options& o, int stop_after = -1,
    std::chrono::milliseconds round_deadline = std::chrono::seconds(20)) {
  std::vector<std::vector<net::inproc>> worlds;
  worlds.reserve(std::size_t(g.plan.paths()));
  std::vector<std::unique_ptr<train::stage_worker<nn::gpt, net::inproc>>> ws;
  for (int p = 0; p < g.plan.paths(); ++p) {
    worlds.push_back(net::inproc::world(K));
    const auto ps = pipeline::path_stages::make(g.model, g.plan.path_spans(p), K).value_or_throw();
    for (int k = 0; k < K; ++k)
      ws.push_back(train::make_stage_worker(p * K + k, g.model, g.plan, p, ps,
                                            worlds.back()[std::size_t(k)], o, adam, stage_icfg,
                                            g.shards[std::size_t(p)], g.seed(p)));
  }
  std::vector<status> errs(ws.size());
  std::vector<std::thread> th;
  for (std::size_t i = 0; i < ws.size(); ++i)
    th.emplace_back([&, i] {
      // stop_after: the last stage of path 0 leaves after that many rounds (its process ends).
      const bool leaves = stop_after >= 0 && i + 1 == std::size_t(K);
      const train::worker_loop_options lo{.rounds = leaves ? stop_after : rounds,
                                          .round_deadline = round_deadline};
      errs[i] = train::run_worker(*ws[i], store, lo);
      if (leaves) {
        worlds[0][std::size_t(K - 1)].close();
        return;
      }
      if (errs[i]) errs[i] = ws[i]->loop().close();
    });
  for (auto& t : th) t.join();
  return errs;
}

// The one-process reference of local-loss DiPaCo: each path's whole model in one arena trained
// by pipeline::local_reference (every stage in turn), its modules' Δ pushed by hand.
std::vector<std::vector<float>> local_reference_run(grid_run& g, int K,
                                                    const pipeline::pipeline_options& o) {
  store::module_store<outer::nesterov> s(g.plan.module_table(), outer_opt,
                                         {.weight_by_shard = true});
  for (int m = 0; m < g.plan.modules(); ++m) {
    const auto& sp = g.plan.span_of(m);
    s.set(m, std::span<const float>(g.a0.get(plane::param).data() + sp.offset, sp.size));
  }
  struct path_state {
    arena<host> a;
    std::unique_ptr<pipeline::local_reference<nn::gpt>> ref;
    io::batch_sampler batches;
    long step = 0;
  };
  std::vector<path_state> paths;
  for (int p = 0; p < g.plan.paths(); ++p) {
    const auto ps = pipeline::path_stages::make(g.model, g.plan.path_spans(p), K).value_or_throw();
    paths.push_back(
        {arena<host>(g.model.layout()),
         std::make_unique<pipeline::local_reference<nn::gpt>>(g.model, ps.plan, o, stage_icfg.batch,
                                                              stage_icfg.ctx, g.seed(p)),
         io::batch_sampler(g.shards[std::size_t(p)], stage_icfg.batch, stage_icfg.ctx, g.seed(p))});
  }
  std::vector<std::int32_t> x(std::size_t(stage_icfg.batch) * stage_icfg.ctx), y(x.size());
  for (long r = 0; r < rounds; ++r) {
    for (int p = 0; p < g.plan.paths(); ++p) {
      auto& st = paths[std::size_t(p)];
      auto th = st.a.get(plane::param);
      for (int m : g.plan.path_modules(p)) {
        const auto& sp = g.plan.span_of(m);
        s.pull(m, std::span<float>(th.data() + sp.offset, sp.size));
      }
      const std::vector<float> start(th.begin(), th.end());
      for (int i = 0; i < H; ++i) {
        st.batches.next(x.data(), y.data());
        ++st.step;
        st.ref->step(st.a, adam, stage_icfg.schedule.lr_at(st.step), x.data(), y.data());
      }
      for (int m : g.plan.path_modules(p)) {
        const auto& sp = g.plan.span_of(m);
        std::vector<float> d(sp.size);
        for (std::size_t i = 0; i < sp.size; ++i) d[i] = start[sp.offset + i] - th[sp.offset + i];
        REQUIRE(s.push(m, p, r, d, double(g.shards[std::size_t(p)].ids.size())).ok());
      }
    }
    for (int m = 0; m < g.plan.modules(); ++m) s.close(m);
  }
  return modules_of(s);
}

}  // namespace

TEST_CASE("local-loss DiPaCo: each stage pushes its own modules, bit-identical to one process",
          "[train][stage_worker][known-answer]") {
  for (auto head : {pipeline::head_kind::linear, pipeline::head_kind::shared_readout}) {
    for (int q : {1, 3}) {
      CAPTURE(int(head), q);
      grid_run g;
      const pipeline::pipeline_options o{.sched = pipeline::schedule::local,
                                         .queue_depth = q,
                                         .head = head,
                                         .readout_refresh = 3,
                                         .readout_delay = 1,
                                         .timeout = std::chrono::milliseconds(20000)};
      auto store = g.make_store();
      for (const auto& e : run_stages(g, *store, 2, o)) REQUIRE(e.ok());
      for (int m = 0; m < g.plan.modules(); ++m) REQUIRE(store->store().round(m) == rounds);
      const auto got = modules_of(store->store());
      const auto want = local_reference_run(g, 2, o);
      for (std::size_t m = 0; m < got.size(); ++m) {
        CAPTURE(m);
        REQUIRE(std::memcmp(got[m].data(), want[m].data(), got[m].size() * sizeof(float)) == 0);
      }
      // The modules moved: the run trained.
      REQUIRE(std::memcmp(got[0].data(), g.a0.get(plane::param).data(), 64) != 0);
    }
  }
}

TEST_CASE("a path of one stage, or two under global backprop, is plain DiPaCo bit for bit",
          "[train][stage_worker][known-answer]") {
  // Plain DiPaCo: train::path_worker (the one inner loop on one thread) for each path.
  grid_run g;
  auto plain = g.make_store();
  {
    std::vector<std::unique_ptr<train::path_worker<nn::gpt, optim::adamw>>> ws;
    for (int p = 0; p < g.plan.paths(); ++p)
      ws.push_back(std::make_unique<train::path_worker<nn::gpt, optim::adamw>>(
          p, g.model, g.plan.path_spans(p), g.plan.path_modules(p), adam, stage_icfg,
          g.shards[std::size_t(p)], g.seed(p)));
    std::vector<status> errs(ws.size());
    std::vector<std::thread> th;
    for (std::size_t i = 0; i < ws.size(); ++i)
      th.emplace_back([&, i] { errs[i] = train::run_worker(*ws[i], *plain, {.rounds = rounds}); });
    for (auto& t : th) t.join();
    for (const auto& e : errs) REQUIRE(e.ok());
  }
  const auto want = modules_of(plain->store());
  SECTION("one stage (local mode: the model's own loss)") {
    auto store = g.make_store();
    for (const auto& e : run_stages(g, *store, 1, {.sched = pipeline::schedule::local}))
      REQUIRE(e.ok());
    const auto got = modules_of(store->store());
    for (std::size_t m = 0; m < got.size(); ++m)
      REQUIRE(std::memcmp(got[m].data(), want[m].data(), got[m].size() * sizeof(float)) == 0);
  }
  SECTION("two stages, GPipe with one micro-batch") {
    auto store = g.make_store();
    for (const auto& e : run_stages(g, *store, 2, {.sched = pipeline::schedule::gpipe}))
      REQUIRE(e.ok());
    const auto got = modules_of(store->store());
    for (std::size_t m = 0; m < got.size(); ++m)
      REQUIRE(std::memcmp(got[m].data(), want[m].data(), got[m].size() * sizeof(float)) == 0);
  }
}

TEST_CASE("a stage that goes away is an error on its neighbour within the deadline",
          "[train][stage_worker]") {
  grid_run g;
  auto store = g.make_store();
  const auto t0 = std::chrono::steady_clock::now();
  const auto errs = run_stages(g, *store, 2,
                               {.sched = pipeline::schedule::local,
                                .queue_depth = 1,
                                .timeout = std::chrono::milliseconds(1500)},
                               1, std::chrono::milliseconds(2000));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(errs[1].ok());  // path 0's last stage left after round 1, as asked
  REQUIRE_FALSE(errs[0].ok());
  CHECK_THAT(errs[0].error().what(), Catch::Contains("pipeline stage 0"));
  CHECK(s < 15);
}
