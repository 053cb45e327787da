// Pipelines: stage plans and schedules, global backprop against one process (bit for bit
// against the same micro-batches accumulated in the schedule's order; within float tolerance of
// one full batch), local losses bit-identical to their one-process reference whatever the
// transport, queue depth or delays, K = 1 equal to plain training, gradient isolation, and a
// stage killed mid-run.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "paco/io/batches.hpp"
#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/pipeline/pipeline.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/inner_loop.hpp"
#ifdef PACO_TEST_ASIO
#include "paco/collectives/agree.hpp"
#include "paco/collectives/barrier.hpp"
#include "paco/job/stages.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/free_port.hpp"
#include "paco/net/subgroup.hpp"
#include "support/processes.hpp"
#endif

using namespace paco;
using namespace paco::pipeline;

namespace {

constexpr int B = 4, T = 16;
constexpr std::uint64_t seed = 7;

nn::gpt tiny(int layers = 4) {
  return nn::gpt({.vocab = 64, .ctx = T, .d = 32, .layers = layers, .heads = 2, .mlp_mult = 2});
}
const io::token_stream& data() {
  static const auto s = testing::synthetic_stream(3, 20000, 7, 5, 64);
  return s;
}
arena<host> fresh(const nn::gpt& m) {
  arena<host> a(m.layout());
  m.init(a, seed);
  return a;
}
bool same_params(const arena<host>& x, const arena<host>& y, std::size_t b, std::size_t e) {
  return std::memcmp(x.get(plane::param).data() + b, y.get(plane::param).data() + b,
                     (e - b) * sizeof(float)) == 0;
}
float lr_at(long t) {
  return 3e-3f * (1.0f - 0.02f * float(t));
}
const optim::adamw opt{.lr = 3e-3f, .weight_decay = 0.1f};

struct run_result {
  arena<host> model;                        // rank 0's after gather: the whole model
  std::vector<std::vector<double>> losses;  // [stage][step]
  std::vector<stage_stats> stats;
  std::vector<status> errors;
};

// Stage checkpoints in a run_stages run: each stage writes its file of step save_at to dir, and
// (from ≥ 0) starts from its file of step `from` instead of the initial model.
struct checkpointing {
  std::filesystem::path dir;
  long save_at = -1;
  long from = -1;
};

// Every stage of `plan` on its own thread, each with its own transport from make_net(k), `steps`
// steps; then the model gathered on rank 0. stall(k, t): sleeps a stage between steps.
template <class Net>
run_result run_stages(const nn::gpt& model, const stage_plan& plan, const pipeline_options& o,
                      int steps, std::function<Net(int)> make_net,
                      std::function<void(int, long)> stall = {},
                      const checkpointing* ck = nullptr) {
  const int K = plan.stages();
  run_result r;
  r.losses.resize(std::size_t(K));
  r.stats.resize(std::size_t(K));
  r.errors.resize(std::size_t(K));
  std::vector<arena<host>> arenas;
  for (int k = 0; k < K; ++k) arenas.push_back(fresh(model));
  std::vector<std::thread> threads;
  for (int k = 0; k < K; ++k)
    threads.emplace_back([&, k] {
      auto net = make_net(k);
      auto& tr = *net;
      stage_runner<nn::gpt, std::remove_reference_t<decltype(tr)>> run(model, plan, o, B, T, tr,
                                                                       seed);
      io::batch_sampler batches(data(), B, T, seed);
      std::vector<std::int32_t> x(B * T), y(B * T);
      auto& a = arenas[std::size_t(k)];
      const stage_identity who{"test-run", k, K};
      long from = 0;
      if (ck && ck->from >= 0) {
        auto got = load_stage_file(ck->dir / stage_file_name(k, ck->from), model, a, parts_of(run),
                                   "test", who);
        if (!got) return void(r.errors[std::size_t(k)] = got.error());
        from = got->at.step;
        batches.seek(got->at.sampler);
        if (auto s = run.resume_at(from, std::move(got->in_flight)); !s)
          return void(r.errors[std::size_t(k)] = s);
      }
      for (long t = from + 1; t <= steps; ++t) {
        batches.next(x.data(), y.data());
        auto l = run.step(a, opt, lr_at(t), x.data(), y.data());
        if (!l) {
          r.errors[std::size_t(k)] = l.error();
          return;
        }
        r.losses[std::size_t(k)].push_back(*l);
        if (ck && t == ck->save_at)
          if (auto s =
                  save_stage_file(ck->dir / stage_file_name(k, t), model, a, parts_of(run),
                                  run.readouts_in_flight(), {t, batches.position()}, "test", who);
              !s)
            return void(r.errors[std::size_t(k)] = s);
        if (stall) stall(k, t);
      }
      if (auto s = run.drain(); !s) r.errors[std::size_t(k)] = s;
      if (auto s = run.gather(a); !s) r.errors[std::size_t(k)] = s;
      r.stats[std::size_t(k)] = run.stats();
    });
  for (auto& t : threads) t.join();
  r.model = std::move(arenas[0]);
  return r;
}

std::function<net::inproc*(int)> inproc_world(int K, std::vector<net::inproc>& w) {
  w = net::inproc::world(K);
  return [&w](int k) { return &w[std::size_t(k)]; };
}

// The one-process reference of local losses: the model and each stage's losses.
std::pair<arena<host>, std::vector<std::vector<double>>> local_ref(const nn::gpt& model,
                                                                   const stage_plan& plan,
                                                                   const pipeline_options& o,
                                                                   int steps) {
  auto a = fresh(model);
  local_reference<nn::gpt> ref(model, plan, o, B, T, seed);
  io::batch_sampler batches(data(), B, T, seed);
  std::vector<std::int32_t> x(B * T), y(B * T);
  std::vector<std::vector<double>> losses(std::size_t(plan.stages()));
  for (long t = 1; t <= steps; ++t) {
    batches.next(x.data(), y.data());
    auto l = ref.step(a, opt, lr_at(t), x.data(), y.data());
    for (std::size_t k = 0; k < l.size(); ++k) losses[k].push_back(l[k]);
  }
  return {std::move(a), std::move(losses)};
}

// Runs f(head, K, q, plan) for every local-loss case the equality tests cover: both heads,
// K = 2 and 3 stages of a 4-block model, queue depths 1, 2 and 4.
void local_grid(const std::function<void(head_kind, int, int, const stage_plan&)>& f) {
  for (auto head : {head_kind::linear, head_kind::shared_readout})
    for (int K : {2, 3})
      for (int q : {1, 2, 4}) {
        INFO(name(head) << " K=" << K << " q=" << q);
        f(head, K, q, stage_plan::equal(4, K).value_or_throw());
      }
}

// The local-loss options of the equality tests: queue q, a readout copy every 3 steps applied
// q − 1 steps later (so with q ≥ 2 one is in flight while later steps run).
pipeline_options local_options(head_kind head, int q) {
  return {.queue_depth = q,
          .head = head,
          .readout_refresh = 3,
          .readout_delay = q - 1,
          .timeout = std::chrono::seconds(30)};
}

// Runs f(plan, options) for every global-backprop case: GPipe and 1F1B, K = 2 and 3 stages of a
// 4-block model, M = 4 micro-batches.
void global_grid(const std::function<void(const stage_plan&, const pipeline_options&)>& f) {
  for (auto sched : {schedule::gpipe, schedule::one_f_one_b})
    for (int K : {2, 3}) {
      INFO(name(sched) << " K=" << K);
      f(stage_plan::equal(4, K).value_or_throw(),
        {.sched = sched, .micro_batches = 4, .timeout = std::chrono::seconds(30)});
    }
}

// The one-process reference of global backprop (global_reference_step: the model's own
// forward_backward over o's micro-batches, or over one full batch when micro is 1), `steps`
// steps: the model and each step's loss.
std::pair<arena<host>, std::vector<double>> global_ref(const nn::gpt& model,
                                                       const pipeline_options& o, int micro,
                                                       int steps) {
  auto a = fresh(model);
  auto ws = model.make_workspace({B / micro, T});
  io::batch_sampler batches(data(), B, T, seed);
  std::vector<std::int32_t> x(B * T), y(B * T);
  std::vector<double> losses;
  for (long t = 1; t <= steps; ++t) {
    batches.next(x.data(), y.data());
    losses.push_back(global_reference_step(model, a, opt, lr_at(t), t, x.data(), y.data(), B, T,
                                           o.sched, micro, o.grad_clip, ws));
  }
  return {std::move(a), std::move(losses)};
}

}  // namespace

TEST_CASE("predict_step: GPipe's closed forms", "[pipeline][time_model][known-answer]") {
  const int K = 4, M = 8;
  const double tf = 0.01, tb = 0.02, alpha = 0.003, rate = 1e6;
  const std::size_t a = 20000;  // 0.02 s on the link
  const std::vector<stage_time> compute(K, {tf, tb}), none(K, {0, 0});
  const std::vector<link_time> free(K - 1, {0, 0}), shaped(K - 1, {alpha, rate});
  // Compute only: the bubble formula, (M + K − 1)(t_f + t_b).
  CHECK(predict_step(schedule::gpipe, K, M, compute, free, free, a).value_or_throw() ==
        Approx((M + K - 1) * (tf + tb)));
  // Links only: each way (K − 1) latencies and M + K − 2 transmissions (the first message crosses
  // K − 1 links, the other M − 1 follow it on the last one).
  CHECK(predict_step(schedule::gpipe, K, M, none, shaped, shaped, a).value_or_throw() ==
        Approx(2 * ((K - 1) * alpha + (M + K - 2) * (double(a) / rate))));
  // One micro-batch: everything in series.
  CHECK(predict_step(schedule::gpipe, K, 1, compute, shaped, shaped, a).value_or_throw() ==
        Approx(K * (tf + tb) + 2 * (K - 1) * (alpha + double(a) / rate)));
  CHECK_FALSE(predict_step(schedule::local, K, M, compute, free, free, a));
  CHECK_FALSE(predict_step(schedule::gpipe, K, M, compute, free, std::vector<link_time>{}, a));
}

TEST_CASE("stage_plan cuts a model into contiguous stages and names what is wrong", "[pipeline]") {
  const auto m = tiny(4);
  auto p = stage_plan::equal(4, 3).value_or_throw();
  CHECK(p.first == std::vector<int>{0, 2, 3, 4});
  // Spans tile the plane in order.
  std::size_t end = 0;
  for (int k = 0; k < 3; ++k) {
    const auto [b, e] = param_span(m, p, k);
    CHECK(b == end);
    CHECK(e > b);
    end = e;
  }
  CHECK(end == m.layout().total());
  CHECK(param_span(m, p, 1).first == m.off("block.2"));
  auto more = stage_plan::equal(4, 5);
  REQUIRE_FALSE(more);
  CHECK_THAT(more.error().what(), Catch::Contains("pipeline.stages"));
  auto gap = stage_plan::at({2, 2}, 4);
  REQUIRE_FALSE(gap);
  CHECK_THAT(gap.error().what(), Catch::Contains("no block"));
  auto uncovered = stage_plan{{0, 2, 3}}.validate(4);
  REQUIRE_FALSE(uncovered);
  CHECK_THAT(uncovered.error().what(), Catch::Contains("cover"));
  pipeline_options no_queue;
  no_queue.queue_depth = 0;
  CHECK_THAT(no_queue.validate(B).error().what(), Catch::Contains("pipeline.queue_depth"));
  pipeline_options odd;
  odd.sched = schedule::gpipe;
  odd.micro_batches = 3;
  CHECK_THAT(odd.validate(B).error().what(), Catch::Contains("pipeline.micro_batches"));
  nn::gpt tied({.vocab = 64, .ctx = T, .d = 32, .layers = 2, .heads = 2, .tie_weights = true});
  CHECK_THROWS_WITH((stage<nn::gpt>(tied, stage_plan::equal(2, 2).value_or_throw(), 0, {2, T}, 1)),
                    Catch::Contains("tie_weights"));
}

TEST_CASE("GPipe and 1F1B schedules are complete, deadlock-free and stash what they should",
          "[pipeline]") {
  for (auto s : {schedule::gpipe, schedule::one_f_one_b})
    for (int K = 1; K <= 4; ++K)
      for (int Mb = 1; Mb <= 8; ++Mb) {
        std::vector<std::vector<op>> all;
        for (int k = 0; k < K; ++k) all.push_back(stage_ops(s, K, k, Mb));
        INFO(name(s) << " K=" << K << " M=" << Mb);
        CHECK(validate_schedule(all, Mb).ok());
        for (int k = 0; k < K; ++k)
          CHECK(stash_needed(all[std::size_t(k)]) ==
                (s == schedule::gpipe ? Mb : std::min(K - k, Mb)));
      }
  // A last stage that runs a backward before its forward waits forever.
  std::vector<std::vector<op>> broken{
      stage_ops(schedule::gpipe, 2, 0, 2),
      {{op::backward, 0}, {op::forward, 0}, {op::forward, 1}, {op::backward, 1}}};
  auto v = validate_schedule(broken, 2);
  REQUIRE_FALSE(v);
  CHECK_THAT(v.error().what(), Catch::Contains("waits forever"));
}

TEST_CASE("global backprop over stages equals one process, bit for bit in the schedule's order",
          "[pipeline]") {
  const auto model = tiny(4);
  global_grid([&](const stage_plan& plan, const pipeline_options& o) {
    const int K = plan.stages();
    std::vector<net::inproc> w;
    auto r = run_stages<net::inproc*>(model, plan, o, 5, inproc_world(K, w));
    for (auto& e : r.errors) REQUIRE(e.ok());
    auto [a, losses] = global_ref(model, o, 4, 5);
    CHECK(same_params(r.model, a, 0, model.layout().total()));
    CHECK(r.losses[std::size_t(K - 1)] == losses);
    // One full batch: the same maths in another summation order.
    auto [full, full_losses] = global_ref(model, o, 1, 5);
    const auto p = r.model.get(plane::param), q = full.get(plane::param);
    double worst = 0;
    for (std::size_t i = 0; i < p.size(); ++i)
      worst = std::max(worst, std::abs(double(p[i]) - q[i]) / (4e-5 + 1e-5 * std::abs(q[i])));
    CHECK(worst <= 1.0);
    for (int k = 0; k < K; ++k)
      CHECK(r.stats[std::size_t(k)].stash_high_water ==
            (o.sched == schedule::gpipe ? 4 : std::min(K - k, 4)));
  });
}

TEST_CASE("local losses with one stage are plain training, bit for bit", "[pipeline]") {
  const auto model = tiny(2);
  const auto plan = stage_plan::equal(2, 1).value_or_throw();
  std::vector<net::inproc> w;
  auto r = run_stages<net::inproc*>(model, plan, {}, 6, inproc_world(1, w));
  REQUIRE(r.errors[0].ok());
  auto a = fresh(model);
  train::inner_loop<nn::gpt, optim::adamw> loop(model, {.batch = B, .ctx = T}, data(), seed);
  for (long t = 1; t <= 6; ++t)
    CHECK(loop.step(a, opt, lr_at(t)) == r.losses[0][std::size_t(t - 1)]);
  CHECK(same_params(r.model, a, 0, model.layout().total()));
}

TEST_CASE("local losses over stages are bit-identical to one process, whatever the queue",
          "[pipeline]") {
  const auto model = tiny(4);
  local_grid([&](head_kind head, int K, int q, const stage_plan& plan) {
    const auto o = local_options(head, q);
    std::vector<net::inproc> w;
    std::atomic<int> n{0};
    auto stall = [&](int k, long t) {  // stages stall at different steps
      if ((t + k * 2) % 5 == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(2 + (n++ % 4)));
    };
    auto r = run_stages<net::inproc*>(model, plan, o, 12, inproc_world(K, w), stall);
    for (auto& e : r.errors) REQUIRE((e.ok() ? std::string() : e.error().what()) == "");
    auto [a, losses] = local_ref(model, plan, o, 12);
    CHECK(same_params(r.model, a, 0, model.layout().total()));
    CHECK(r.losses == losses);
    for (int k = 0; k + 1 < K; ++k) CHECK(r.stats[std::size_t(k)].stash_high_water == 1);
  });
}

TEST_CASE("stages resumed from their checkpoints of one step end as the uninterrupted run",
          "[pipeline][checkpoint]") {
  // Each stage writes its file at step 7 of 12; a second run starts every stage from them. The
  // expected model is the one-process reference's (a second implementation), and the resumed
  // steps' losses are its losses of steps 8 … 12. With shared_readout (S = 3, D = q − 1) the copy
  // taken after step 6 applies at step 6 + q: in flight at step 7 for q ≥ 2, sent again by the
  // resumed last stage from its file.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("paco_stage_ck_" + std::to_string(getpid()));
  const auto model = tiny(4);
  auto resumed_equals = [&](const stage_plan& plan, const pipeline_options& o, auto reference) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    const int K = plan.stages();
    std::vector<net::inproc> w1, w2;
    const checkpointing save{dir, 7, -1}, resume{dir, -1, 7};
    auto first = run_stages<net::inproc*>(model, plan, o, 12, inproc_world(K, w1), {}, &save);
    for (auto& e : first.errors) REQUIRE((e.ok() ? std::string() : e.error().what()) == "");
    auto again = run_stages<net::inproc*>(model, plan, o, 12, inproc_world(K, w2), {}, &resume);
    for (auto& e : again.errors) REQUIRE((e.ok() ? std::string() : e.error().what()) == "");
    auto [a, losses] = reference();
    CHECK(same_params(first.model, a, 0, model.layout().total()));
    CHECK(same_params(again.model, a, 0, model.layout().total()));
    for (int k = 0; k < K; ++k) {
      const auto& l = losses[std::size_t(o.sched == schedule::local ? k : 0)];
      if (o.sched != schedule::local && k + 1 < K) continue;  // NaN: no loss of its own
      CHECK(again.losses[std::size_t(k)] == std::vector<double>(l.end() - 5, l.end()));
    }
  };
  local_grid([&](head_kind head, int K, int q, const stage_plan& plan) {
    const auto o = local_options(head, q);
    resumed_equals(plan, o, [&] { return local_ref(model, plan, o, 12); });
    (void)K;
  });
  global_grid([&](const stage_plan& plan, const pipeline_options& o) {
    resumed_equals(plan, o, [&] {
      auto [a, l] = global_ref(model, o, 4, 12);
      return std::make_pair(std::move(a), std::vector<std::vector<double>>{l});
    });
  });
  {  // a file of another run, another stage, or edited, is refused naming it
    const auto plan = stage_plan::equal(4, 2).value_or_throw();
    auto a = fresh(model);
    const stage_parts whole{{0, model.layout().total()}, nullptr, {}};
    const auto f = dir / "x.safetensors";
    REQUIRE(save_stage_file(f, model, a, whole, {}, {3, {}}, "k=1", {"run-a", 0, 2}).ok());
    auto other_run = load_stage_file(f, model, a, whole, "k=1", {"run-b", 0, 2});
    REQUIRE(!other_run);
    CHECK_THAT(other_run.error().what(), Catch::Contains("another run"));
    auto other_stage = load_stage_file(f, model, a, whole, "k=1", {"run-a", 1, 2});
    REQUIRE(!other_stage);
    CHECK_THAT(other_stage.error().what(), Catch::Contains("stage"));
    CHECK(!load_stage_file(f, model, a, whole, "k=2", {"run-a", 0, 2}));  // another config
    CHECK(newest_common_step(dir, 2, "run-a") == std::nullopt);  // x.safetensors is no stage file
    (void)plan;
  }
  fs::remove_all(dir);
}

TEST_CASE("compressed activations: local losses stay bit-identical, the bytes shrink",
          "[pipeline]") {
  const auto model = tiny(4);
  const auto plan = stage_plan::equal(4, 3).value_or_throw();
  std::size_t fp32_bytes = 0;
  for (auto f : {wire_format::fp32, wire_format::bf16, wire_format::int8}) {
    INFO(name(f));
    const pipeline_options o{.activations = f, .timeout = std::chrono::seconds(30)};
    std::vector<net::inproc> w;
    auto r = run_stages<net::inproc*>(model, plan, o, 8, inproc_world(3, w));
    for (auto& e : r.errors) REQUIRE(e.ok());
    auto [a, losses] = local_ref(model, plan, o, 8);
    CHECK(same_params(r.model, a, 0, model.layout().total()));
    CHECK(r.losses == losses);
    const std::size_t n = std::size_t(B) * T * 32;
    CHECK(r.stats[0].bytes_sent == 8 * activation_codec(f, n).wire_bytes());
    if (f == wire_format::fp32) fp32_bytes = r.stats[0].bytes_sent;
    if (f == wire_format::bf16) CHECK(r.stats[0].bytes_sent * 2 == fp32_bytes);
    if (f == wire_format::int8) CHECK(r.stats[0].bytes_sent * 3 < fp32_bytes);
    if (f != wire_format::fp32) {  // the rounding reaches the later stages: not fp32's run
      auto [a32, l32] = local_ref(model, plan, {.timeout = std::chrono::seconds(30)}, 8);
      CHECK(l32[0] == losses[0]);  // stage 0 reads no activation
      CHECK(l32[2] != losses[2]);
    }
  }
  // Global backprop with bf16 on both directions trains, at half the bytes.
  const pipeline_options g{.sched = schedule::gpipe,
                           .micro_batches = 2,
                           .activations = wire_format::bf16,
                           .timeout = std::chrono::seconds(30)};
  std::vector<net::inproc> w;
  auto r = run_stages<net::inproc*>(model, stage_plan::equal(4, 2).value_or_throw(), g, 12,
                                    inproc_world(2, w));
  for (auto& e : r.errors) REQUIRE(e.ok());
  CHECK(r.stats[0].bytes_sent == 12 * 2 * std::size_t(B / 2) * T * 32 * 2);
  CHECK(r.losses[1].back() < r.losses[1].front());
}

TEST_CASE("no gradient crosses a stage boundary in local losses", "[pipeline]") {
  const auto model = tiny(4);
  const auto plan = stage_plan::equal(4, 2).value_or_throw();
  const auto [b1, e1] = param_span(model, plan, 1);
  auto a = fresh(model), perturbed = fresh(model);
  auto th = perturbed.get(plane::param);
  for (std::size_t i = b1; i < e1; ++i) th[i] += 0.01f * float(i % 7);
  local_reference<nn::gpt> ra(model, plan, {}, B, T, seed), rb(model, plan, {}, B, T, seed);
  io::batch_sampler batches(data(), B, T, seed);
  std::vector<std::int32_t> x(B * T), y(B * T);
  for (long t = 1; t <= 3; ++t) {
    batches.next(x.data(), y.data());
    auto la = ra.step(a, opt, lr_at(t), x.data(), y.data());
    auto lb = rb.step(perturbed, opt, lr_at(t), x.data(), y.data());
    CHECK(la[0] == lb[0]);  // stage 0 never sees stage 1's parameters …
    CHECK(la[1] != lb[1]);  // … which do change stage 1's loss
  }
  CHECK(same_params(a, perturbed, 0, e1 == b1 ? 0 : b1));
  CHECK_FALSE(same_params(a, perturbed, b1, e1));
}

#ifdef PACO_TEST_ASIO
namespace {
net::tcp_options tcp_rank(int k, const std::vector<std::string>& peers) {
  net::tcp_options o;
  o.rank = k;
  o.size = int(peers.size());
  o.peers = peers;
  o.token = "pipeline-test";
  o.peer_timeout = std::chrono::milliseconds(1500);
  return o;
}
std::vector<std::string> loopback_peers(int K) {
  std::vector<std::string> p;
  for (int k = 0; k < K; ++k) p.push_back("127.0.0.1:" + std::to_string(net::free_loopback_port()));
  return p;
}
}  // namespace

TEST_CASE(
    "2 pipelines x 2 stages on shaped links, replicas averaged, equal one process on "
    "the global batch",
    "[pipeline][tcp][replicas]") {
  // DT-FM's D_PP = 2 × D_DP = 2 executed: device = pipeline·K + stage, one asio_tcp world with
  // every link shaped (its own latency and rate per peer); each pipeline a subgroup running GPipe
  // (M = 2) on its own batch of B sequences, each stage's replicas a subgroup averaging gradients.
  const auto model = tiny(4);
  const int K = 2, D = 2, steps = 3;
  const auto plan = stage_plan::equal(4, K).value_or_throw();
  const pipeline_options o{
      .sched = schedule::gpipe, .micro_batches = 2, .timeout = std::chrono::seconds(30)};
  const auto peers = loopback_peers(K * D);
  std::vector<arena<host>> arenas;
  for (int d = 0; d < K * D; ++d) arenas.push_back(fresh(model));
  std::vector<status> errs(std::size_t(K * D));
  std::vector<std::thread> th;
  for (int d = 0; d < K * D; ++d)
    th.emplace_back([&, d] {
      const int j = d / K, s = d % K;
      auto opts = tcp_rank(d, peers);
      for (int q = 0; q < K * D; ++q)
        if (q != d) {
          net::shaper_options sh;
          sh.latency = std::chrono::microseconds(500 + 700 * std::abs(q - d));
          sh.rate_bytes_per_s = 4e6 + 1e6 * ((q + d) % 3);
          opts.peer_shapers[q] = sh;
        }
      auto world = net::asio_tcp::connect(opts).value_or_throw();
      net::subgroup<net::asio_tcp> pipe(*world, {j * K, j * K + 1});
      net::subgroup<net::asio_tcp> reps(*world, {s, K + s});
      stage_runner<nn::gpt, net::subgroup<net::asio_tcp>> run(model, plan, o, B, T, pipe, seed);
      run.reduce_gradients_with(replica_mean(reps));
      // Replica j draws batch j of the global batch: a sampler per replica.
      io::batch_sampler batches(data(), B, T, seed + std::uint64_t(j));
      std::vector<std::int32_t> x(B * T), y(B * T);
      for (long t = 1; t <= steps && errs[std::size_t(d)].ok(); ++t) {
        batches.next(x.data(), y.data());
        if (auto l = run.step(arenas[std::size_t(d)], opt, lr_at(t), x.data(), y.data()); !l)
          errs[std::size_t(d)] = l.error();
      }
      if (errs[std::size_t(d)].ok()) errs[std::size_t(d)] = run.drain();
      if (errs[std::size_t(d)].ok())
        errs[std::size_t(d)] =
            collectives::barrier(*world, {.until = net::after(std::chrono::seconds(30))});
    });
  for (auto& t : th) t.join();
  for (const auto& e : errs) REQUIRE(e.ok());
  // One process: the global batch (replica 0's sequences, then replica 1's) as 2·M micro-batches.
  auto a = fresh(model);
  auto ws = model.make_workspace({B / o.micro_batches, T});
  std::vector<io::batch_sampler> samplers;
  for (int j = 0; j < D; ++j) samplers.emplace_back(data(), B, T, seed + std::uint64_t(j));
  std::vector<std::int32_t> x(D * B * T), y(D * B * T);
  for (long t = 1; t <= steps; ++t) {
    for (int j = 0; j < D; ++j)
      samplers[std::size_t(j)].next(x.data() + j * B * T, y.data() + j * B * T);
    global_reference_step(model, a, opt, lr_at(t), t, x.data(), y.data(), D * B, T, schedule::gpipe,
                          D * o.micro_batches, o.grad_clip, ws);
  }
  for (int d = 0; d < K * D; ++d) {
    const auto [b, e] = param_span(model, plan, d % K);
    const float* got = arenas[std::size_t(d)].get(plane::param).data();
    const float* want = a.get(plane::param).data();
    double worst = 0, scale = 0;
    for (std::size_t i = b; i < e; ++i) {
      worst = std::max(worst, double(std::abs(got[i] - want[i])));
      scale = std::max(scale, double(std::abs(want[i])));
    }
    CAPTURE(d, worst, scale);
    CHECK(worst <= 1e-5 * std::max(1.0, scale));
    // The two replicas of a stage hold the same parameters, bit for bit.
    if (d >= K) CHECK(same_params(arenas[std::size_t(d)], arenas[std::size_t(d - K)], b, e));
  }
  // The run trained: the model moved.
  CHECK_FALSE(same_params(a, fresh(model), 0, model.layout().total()));
}

TEST_CASE("local losses over TCP with link delays are bit-identical to one process",
          "[pipeline][tcp]") {
  const auto model = tiny(4);
  local_grid([&](head_kind head, int K, int q, const stage_plan& plan) {
    // shared_readout: a copy after every 3rd step, the last one (step 9) after the last step
    // that applies one: the middle stage must still be there to take it.
    const pipeline_options o{.queue_depth = q,
                             .head = head,
                             .readout_refresh = 3,
                             .readout_delay = 1,
                             .timeout = std::chrono::seconds(30)};
    const auto peers = loopback_peers(K);
    auto make = [&](int k) {
      auto opts = tcp_rank(k, peers);
      opts.shaper.latency = std::chrono::milliseconds(3 * q);  // both directions delayed
      opts.shaper.rate_bytes_per_s = 2e6;
      if (k == K - 1)  // the last stage is the slowest: its neighbour waits at the end
        opts.shaper.latency = std::chrono::milliseconds(8);
      return net::asio_tcp::connect(opts).value_or_throw();
    };
    auto r = run_stages<std::unique_ptr<net::asio_tcp>>(model, plan, o, 9, make);
    std::string errors;
    for (auto& e : r.errors) errors += e.ok() ? std::string() : e.error().what() + "\n";
    REQUIRE(errors == "");
    auto [a, losses] = local_ref(model, plan, o, 9);
    CHECK(same_params(r.model, a, 0, model.layout().total()));
    CHECK(r.losses == losses);
    if (head == head_kind::linear)
      CHECK(r.stats[0].bytes_sent == 9 * std::size_t(B) * T * 32 * sizeof(float));
  });
}

TEST_CASE("GPipe and 1F1B over TCP equal one process", "[pipeline][tcp]") {
  const auto model = tiny(4);
  global_grid([&](const stage_plan& plan, const pipeline_options& o) {
    const int K = plan.stages();
    const auto peers = loopback_peers(K);
    auto r = run_stages<std::unique_ptr<net::asio_tcp>>(model, plan, o, 4, [&](int k) {
      return net::asio_tcp::connect(tcp_rank(k, peers)).value_or_throw();
    });
    for (auto& e : r.errors) REQUIRE(e.ok());
    auto [a, losses] = global_ref(model, o, 4, 4);
    CHECK(same_params(r.model, a, 0, model.layout().total()));
    CHECK(r.losses[std::size_t(K - 1)] == losses);
  });
}

TEST_CASE("a killed stage makes its neighbour fail within the deadline, naming it",
          "[pipeline][tcp]") {
  const auto model = tiny(4);
  const auto plan = stage_plan::equal(4, 2).value_or_throw();
  const pipeline_options o{.queue_depth = 2, .timeout = std::chrono::seconds(20)};
  const auto peers = loopback_peers(2);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // stage 1, killed (SIGKILL: no goodbye) after three steps
    auto net = net::asio_tcp::connect(tcp_rank(1, peers));
    if (!net) _exit(3);
    auto a = fresh(model);
    stage_runner<nn::gpt, net::asio_tcp> run(model, plan, o, B, T, **net, seed);
    io::batch_sampler batches(data(), B, T, seed);
    std::vector<std::int32_t> x(B * T), y(B * T);
    for (long t = 1; t <= 3; ++t) {
      batches.next(x.data(), y.data());
      if (!run.step(a, opt, lr_at(t), x.data(), y.data())) _exit(4);
    }
    std::raise(SIGKILL);
  }
  auto net = net::asio_tcp::connect(tcp_rank(0, peers)).value_or_throw();
  auto a = fresh(model);
  stage_runner<nn::gpt, net::asio_tcp> run(model, plan, o, B, T, *net, seed);
  io::batch_sampler batches(data(), B, T, seed);
  std::vector<std::int32_t> x(B * T), y(B * T);
  status failed;
  auto t_fail = std::chrono::steady_clock::now();
  long t = 1;
  for (; t <= 1000 && failed.ok(); ++t) {
    batches.next(x.data(), y.data());
    t_fail = std::chrono::steady_clock::now();
    auto l = run.step(a, opt, lr_at(t), x.data(), y.data());
    if (!l) failed = l.error();
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_fail).count();
  int st = 0;
  waitpid(child, &st, 0);
  CHECK(WIFSIGNALED(st));
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(failed.error().what(), Catch::Contains("pipeline stage 0"));
  CHECK_THAT(failed.error().what(), Catch::Contains("stage 1"));
  CHECK(failed.error().code == make_error_code(errc::peer_lost));
  CHECK(waited < 10.0);  // the peer timeout (1.5 s), far inside the 20 s deadline
  CHECK(t <= 8);         // at most q steps past the last one stage 1 took
}

TEST_CASE(
    "stages that cannot agree: a stage lost is a lost link (restarted), other settings bad "
    "input",
    "[pipeline][tcp][job]") {
  const std::vector<collectives::agree_field> mine{{"model", "gpt d=32"}, {"queue", "2"}};
  for (const bool dies : {true, false}) {
    INFO((dies ? "stage 1 killed before it agrees" : "stage 1 started with queue 3"));
    const auto peers = loopback_peers(2);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // stage 1
      auto net = net::asio_tcp::connect(tcp_rank(1, peers));
      if (!net) _exit(3);
      if (dies) std::raise(SIGKILL);  // no goodbye: its neighbour is agreeing
      const std::vector<collectives::agree_field> other{{"model", "gpt d=32"}, {"queue", "3"}};
      (void)collectives::agree(**net, other);
      _exit(0);
    }
    auto net = net::asio_tcp::connect(tcp_rank(0, peers)).value_or_throw();
    collectives::collective_options o;
    o.until = net::after(std::chrono::seconds(20));
    const auto a = collectives::agree(*net, mine, o);
    int st = 0;
    waitpid(child, &st, 0);
    REQUIRE_FALSE(a.ok());
    const auto [code, why] = job::stage_agreement_failure(a.error());
    INFO(why);
    // A lost stage must be restartable (the launcher mends it); differing settings must not be.
    CHECK(code == (dies ? job::exit_link_lost : job::exit_bad_input));
    CHECK(job::restartable(code) == dies);
    CHECK_THAT(why, Catch::Contains(dies ? "a stage was lost" : "different settings"));
  }
}
#endif

#ifdef PACO_TEST_ASIO
namespace {
// paco_train's pipeline job on Brown with a tiny GPT (d 32, 2 layers, ctx 64, batch 4, 6 steps).
std::vector<std::string> small_pipeline_job(const std::filesystem::path& dir,
                                            const std::vector<std::string>& extra) {
  std::vector<std::string> a{
      std::string(PACO_BINARY_DIR) + "/examples/paco_train/paco_train", "-c",
      std::string(PACO_SOURCE_DIR) + "/examples/configs/pipeline_brown.toml"};
  for (std::string kv :
       {"model.d=32", "model.layers=2", "model.heads=2", "model.ctx=64", "train.batch=4",
        "train.steps=6", "train.warmup=2", "pipeline.eval_tokens=2000", "pipeline.timeout_s=20"})
    a.insert(a.end(), {"--set", kv});
  a.insert(a.end(), {"--set", "output.dir=" + dir.string()});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}
}  // namespace

TEST_CASE("paco_train's pipeline job trains, scores and refuses stages started differently",
          "[pipeline][job]") {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("paco_pipeline_job_" + std::to_string(getpid()));
  if (!fs::exists(small_pipeline_job(dir, {}).front())) {
    WARN("paco_train is not built (PACO_BUILD_EXAMPLES off): the job is not tested");
    return;
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  {  // the launcher: two stage processes, local losses, a results table and results.json
    const auto pid =
        testing::spawn_logged(small_pipeline_job(dir / "run", {}), dir / "run.out", {});
    const int code = testing::exit_code(testing::wait_exit(pid, std::chrono::minutes(5)));
    const std::string out = testing::slurp(dir / "run.out");
    INFO(out);
    REQUIRE(code == 0);
    CHECK_THAT(out, Catch::Contains("local losses, head linear, queue 2"));
    const auto r = nlohmann::json::parse(testing::slurp(dir / "run" / "results.json"));
    CHECK(r["stages"] == 2);
    CHECK(r["tokens_per_s"].get<double>() > 0);
    CHECK(r["test_bpb"].get<double>() > 0);
    CHECK(r["stage_loss_bpb"].size() == 2);
    CHECK(r["bytes_between_stages"] == 6 * 4 * 64 * 32 * 4);
  }
  {  // two stages started by hand with different step counts: both refuse, naming the field
    setenv("PACO_TOKEN", "pipeline-job-test", 1);
    const auto peers = loopback_peers(2);
    const std::string csv = peers[0] + "," + peers[1];
    std::vector<pid_t> pids;
    for (int k = 0; k < 2; ++k)
      pids.push_back(testing::spawn_logged(
          small_pipeline_job(dir / "manual",
                             {"--set", k ? "train.steps=7" : "train.steps=6", "--role", "stage",
                              "--stage", std::to_string(k), "--peers", csv}),
          dir / ("stage" + std::to_string(k) + ".out"), {}));
    for (int k = 0; k < 2; ++k) {
      const int code =
          testing::exit_code(testing::wait_exit(pids[std::size_t(k)], std::chrono::minutes(2)));
      const std::string out = testing::slurp(dir / ("stage" + std::to_string(k) + ".out"));
      INFO(out);
      CHECK(code == 2);
      CHECK_THAT(out, Catch::Contains("the stages were started with different settings"));
      CHECK_THAT(out, Catch::Contains("train.steps"));
    }
  }
  fs::remove_all(dir);
}
#endif

#ifdef PACO_TEST_ASIO
TEST_CASE("a pipeline job whose stage is killed restarts from its checkpoints, bit for bit",
          "[pipeline][job][checkpoint]") {
  // 200 steps over links of 20 ms latency (a few seconds), a checkpoint every 5 steps: stage 1
  // is killed (SIGKILL) once it logged step 60; the launcher restarts the pipeline from the
  // newest step both stages hold, and the gathered model's hash equals the uninterrupted run's.
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("paco_pipeline_resume_" + std::to_string(getpid()));
  const std::vector<std::string> slow{"--set", "train.steps=200",
                                      "--set", "train.checkpoint_every=5",
                                      "--set", "pipeline.link_latency_ms=20"};
  if (!fs::exists(small_pipeline_job(dir, {}).front())) {
    WARN("paco_train is not built (PACO_BUILD_EXAMPLES off): the job is not tested");
    return;
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto run = [&](const std::string& name, std::vector<std::string> extra,
                 const std::function<void()>& meanwhile = {}) {
    extra.insert(extra.begin(), slow.begin(), slow.end());
    const auto pid =
        testing::spawn_logged(small_pipeline_job(dir / name, extra), dir / (name + ".out"), {});
    if (meanwhile) meanwhile();
    return testing::exit_code(testing::wait_exit(pid, std::chrono::minutes(5)));
  };
  auto hash = [&](const std::string& name) {
    return nlohmann::json::parse(testing::slurp(dir / name / "results.json"))["theta_hash"]
        .get<std::string>();
  };
  REQUIRE(run("whole", {}) == 0);
  const std::string whole = hash("whole");
  CHECK(whole.size() == 16);
  const int killed = run("killed", {}, [&] {
    REQUIRE(testing::wait_until(
        [&] {
          return testing::slurp(dir / "killed" / "stage-1.jsonl").find("\"step\":60") !=
                 std::string::npos;
        },
        std::chrono::minutes(2)));
    const auto pids = testing::find_processes({(dir / "killed").string(), "--stage 1"});
    REQUIRE(pids.size() == 1);
    kill(pids[0], SIGKILL);
  });
  const std::string out = testing::slurp(dir / "killed.out");
  INFO(out);
  REQUIRE(killed == 0);
  CHECK_THAT(out, Catch::Contains("stage 1 stopped (exit 137); restarting the pipeline from step"));
  const auto r = nlohmann::json::parse(testing::slurp(dir / "killed" / "results.json"));
  CHECK(r["restarts"] == 1);
  CHECK(r["resumed_from"].get<long>() >= 50);
  CHECK(hash("killed") == whole);
  // The finished run again: refused without --resume or --fresh; --resume from its newest
  // common checkpoint ends with the same model.
  CHECK(run("killed", {}) == 2);
  CHECK_THAT(testing::slurp(dir / "killed.out"), Catch::Contains("--resume to continue it"));
  CHECK(run("killed", {"--resume"}) == 0);
  CHECK(hash("killed") == whole);
  // A directory without a run cannot be resumed.
  CHECK(run("empty", {"--resume"}) == 2);
  CHECK_THAT(testing::slurp(dir / "empty.out"), Catch::Contains("no pipeline run to resume"));
  fs::remove_all(dir);
}
#endif

#ifdef PACO_TEST_ASIO
// paco_train's DiPaCo job with each path cut into 2 stages (local-loss DiPaCo) on Brown: a grid
// of 1 × 2 experts (2 paths: level 0's module shared), a tiny GPT, 2 rounds of 4 inner steps.
TEST_CASE("paco_train's DiPaCo job runs its paths as stages, and restarts a worker's stages",
          "[pipeline][job][dipaco]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("paco_stage_job_" + std::to_string(getpid()));
  const std::string bin = std::string(PACO_BINARY_DIR) + "/examples/paco_train/paco_train";
  if (!fs::exists(bin)) {
    WARN("paco_train is not built (PACO_BUILD_EXAMPLES off): the job is not tested");
    return;
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto job = [&](const std::string& run, int rounds, const std::vector<std::string>& extra) {
    std::vector<std::string> a{
        bin, "-c", std::string(PACO_SOURCE_DIR) + "/examples/configs/dipaco_brown.toml"};
    for (std::string kv : {"dipaco.grid=[1, 2]", "dipaco.stages=2", "dipaco.inner_steps=4",
                           "dipaco.pretrain_steps=4", "dipaco.prefix=16", "dipaco.reroute_every=0",
                           "model.d=32", "model.heads=2", "model.ctx=64", "train.batch=4",
                           "train.warmup=2", "pipeline.timeout_s=20", "launch.peer_timeout_s=2"})
      a.insert(a.end(), {"--set", kv});
    a.insert(a.end(), {"--set", "dipaco.rounds=" + std::to_string(rounds), "--set",
                       "output.dir=" + (dir / run).string()});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  {  // a whole run: 4 stage processes, every module's round closed by its 2 pushes, a table
    const auto pid = testing::spawn_logged(job("run", 2, {}), dir / "run.out", {});
    const int code = testing::exit_code(testing::wait_exit(pid, std::chrono::minutes(5)));
    const std::string out = testing::slurp(dir / "run.out");
    INFO(out);
    REQUIRE(code == 0);
    CHECK_THAT(out, Catch::Contains("2 workers of 2 stages each"));
    CHECK_THAT(out, Catch::Contains("paths cut into 2 stages (local losses, head linear"));
    CHECK_THAT(out, Catch::Contains("all (routed)"));
    const std::string store = testing::slurp(dir / "run" / "store.log");
    CHECK_THAT(store, Catch::Contains("serving 3 modules to 4 workers (2 workers x 2 stages)"));
    CHECK_THAT(store, Catch::Contains("module 0 round 1 closed with 2/2 pushes"));
    CHECK_THAT(store, Catch::Contains("module 2 round 1 closed with 1/1 pushes"));
    for (int w = 1; w <= 2; ++w)
      for (int k = 0; k < 2; ++k) {
        const auto log = dir / "run" /
                         ("worker-" + std::to_string(w) + "-stage-" + std::to_string(k) + ".jsonl");
        const std::string text = testing::slurp(log);
        const auto from = text.rfind('\n', text.size() - 2);
        const auto last = nlohmann::json::parse(text.substr(from == std::string::npos ? 0 : from));
        CHECK(last["round"] == 1);
        CHECK(last["step"] == 8);
        CHECK(last["activation_bytes"].get<double>() == (k == 0 ? 8.0 * 4 * 64 * 32 * 4 : 0.0));
      }
    // Each stage checkpointed its last round, bound to its worker (its group of stage files).
    CHECK(fs::exists(dir / "run" / "worker-2.stage-1.step-8.safetensors"));
    // The finished run resumed: every stage finds its last round done, and the table again.
    const auto again = testing::spawn_logged(job("run", 2, {"--resume"}), dir / "again.out", {});
    CHECK(testing::exit_code(testing::wait_exit(again, std::chrono::minutes(2))) == 0);
    CHECK_THAT(testing::slurp(dir / "again.out"), Catch::Contains("all (routed)"));
    // ... without connecting to the store, which found the run complete and exited.
    for (int k = 0; k < 2; ++k)
      CHECK_THAT(testing::slurp(dir / "run" / ("worker-1-stage-" + std::to_string(k) + ".log")),
                 Catch::Contains("every round is done (step 8)"));
  }
  {  // a stage killed mid-run: the launcher stops its worker's other stage and restarts both
     // from their newest common checkpoint; the run ends whole, every stage at rounds × H steps
    const int rounds = 24;
    const auto pid = testing::spawn_logged(job("killed", rounds, {}), dir / "killed.out", {});
    const auto log = dir / "killed" / "worker-1-stage-1.jsonl";
    REQUIRE(testing::wait_until(
        [&] { return testing::slurp(log).find("\"round\":2,") != std::string::npos; },
        std::chrono::minutes(2)));
    const std::string kill = "pkill -KILL -f '" + (dir / "killed").string() +
                             ".*[-]-worker 1 --stage 1'";  // ([-]: not this shell's own line)
    REQUIRE(std::system(kill.c_str()) == 0);
    const int code = testing::exit_code(testing::wait_exit(pid, std::chrono::minutes(5)));
    const std::string out = testing::slurp(dir / "killed.out");
    INFO(out);
    REQUIRE(code == 0);
    CHECK_THAT(out, Catch::Contains("restarting worker 1's 2 stages from their newest common "
                                    "checkpoint (1 of"));
    CHECK_THAT(out, Catch::Contains("all (routed)"));
    CHECK_THAT(testing::slurp(dir / "killed" / "worker-1-stage-0.log"),
               Catch::Contains("worker 1 stage 0: resumed from step"));
    for (int w = 1; w <= 2; ++w)
      for (int k = 0; k < 2; ++k) {
        const auto f = dir / "killed" /
                       ("worker-" + std::to_string(w) + "-stage-" + std::to_string(k) + ".jsonl");
        const std::string text = testing::slurp(f);
        const auto from = text.rfind('\n', text.size() - 2);
        const auto last = nlohmann::json::parse(text.substr(from == std::string::npos ? 0 : from));
        CHECK(last["step"] == rounds * 4);
        // The resumed stages' logs hold each round once, in order.
        long prev = -1;
        std::istringstream lines(text);
        for (std::string l; std::getline(lines, l);) {
          const long r = nlohmann::json::parse(l)["round"].get<long>();
          CHECK(r > prev);
          prev = r;
        }
      }
  }
  fs::remove_all(dir);
}
#endif
