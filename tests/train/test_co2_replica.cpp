// train/co2_replica.hpp: DiLoCo's overlapped rounds over inproc and over TCP. The known answer
// that tells the rules apart: with one rank, outer SGD at lr 1 and no momentum, co2 and eager
// are plain continuous training and the naive delayed rule is not. Each rule also equals its
// recursion run synchronously by hand (the overlap changes when bytes move, never what is
// computed); the naive delayed replicas stay bit-identical and apply every round's Δ one round
// late; co2's ranks, which differ by their own last Δ, agree once finish() swapped it for the
// mean; traffic and time are counted.
#include <catch2/catch.hpp>

#include <memory>
#include <thread>

#include "../net/tcp_world.hpp"
#include "../net/world.hpp"
#include "paco/collectives/allreduce_ring.hpp"
#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/co2_replica.hpp"
#include "paco/train/diloco_replica.hpp"

using namespace paco;

namespace {

using worker_t = train::path_worker<nn::gpt, optim::adamw>;

struct co2_setup {
  nn::gpt model{{.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2}};
  arena<host> a0{model.layout()};
  std::vector<path::level_span> levels;
  std::vector<io::token_stream> shards;
  train::inner_config icfg{.batch = 2, .ctx = 16, .steps = 3};
  outer::co2 outer{.lr = 0.8f,
                   .momentum = 0.5f,
                   .gap_penalty = 1.5f,
                   .clip = outer::co2::clip_mode::element,
                   .clip_threshold = 0.05f};

  explicit co2_setup(int k) {
    model.init(a0, 6);
    levels = *path::split_gpt_levels(model.layout(), 2, 1);
    for (int r = 0; r < k; ++r) shards.push_back(testing::synthetic_stream(30 + r, 3000, 3 + r, 3));
  }
  std::unique_ptr<worker_t> worker(int r) const {
    auto w = std::make_unique<worker_t>(r, model, levels, std::vector<int>{0}, optim::adamw{}, icfg,
                                        shards[std::size_t(r)], 40u + std::uint64_t(r));
    auto p = w->state().get(plane::param);
    std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), p.begin());
    return w;
  }
};

// One synchronous round's start: from θ (kept in the anchor), H inner steps, Δ = anchor − θ and
// its mean over the ranks at once; θ back to the round's start.
template <net::Transport T>
status train_and_mean(T& t, worker_t& w, std::vector<float>& delta, std::vector<float>& mean) {
  auto th = w.state().get(plane::param), an = w.state().get(plane::anchor);
  const std::size_t n = th.size();
  std::copy(th.begin(), th.end(), an.begin());
  w.train();
  for (std::size_t i = 0; i < n; ++i) delta[i] = an[i] - th[i];
  std::size_t payload = 0;
  const auto s = train::detail::mean_delta(t, nullptr, slice<const float>(delta.data(), n), {},
                                           slice<float>(mean.data(), n), {}, payload);
  std::copy(an.begin(), an.end(), th.begin());
  return s;
}

// The naive delayed recursion without overlap: each round trains, all-reduces its Δ at once,
// and applies the previous round's mean; the last mean is applied after the loop.
template <net::Transport T>
status naive_delayed_by_hand(T& t, worker_t& w, const outer::co2& o, int rounds) {
  const auto th = w.state().get(plane::param);
  const std::size_t n = th.size();
  std::vector<float> state(n, 0.0f), prev(n), mean(n), delta(n);
  for (int k = 0; k < rounds; ++k) {
    if (auto s = train_and_mean(t, w, delta, mean); !s) return s;
    if (k > 0) o.step(std::span<float>(th.data(), n), prev, state);
    prev = mean;
  }
  o.step(std::span<float>(th.data(), n), prev, state);
  return {};
}

// Eager updates without overlap: each round trains, all-reduces its Δ at once, and steps with
// the previous mean plus the change of its own share; after the loop the own share of the last
// round is swapped for the true mean.
template <net::Transport T>
status eager_by_hand(T& t, worker_t& w, const outer::co2& o, int rounds) {
  const auto th = w.state().get(plane::param);
  const std::size_t n = th.size();
  const float inv_k = 1.0f / float(t.size());
  std::vector<float> state(n, 0.0f), prev(n, 0.0f), own(n, 0.0f), mean(n), delta(n), step(n);
  for (int k = 0; k < rounds; ++k) {
    if (auto s = train_and_mean(t, w, delta, mean); !s) return s;
    for (std::size_t i = 0; i < n; ++i) step[i] = prev[i] + (delta[i] - own[i]) * inv_k;
    o.step(std::span<float>(th.data(), n), step, state);
    own = delta;
    prev = mean;
  }
  for (std::size_t i = 0; i < n; ++i) step[i] = prev[i] - own[i] * inv_k;
  o.step(std::span<float>(th.data(), n), step, state);
  return {};
}

}  // namespace

TEST_CASE(
    "co2_replica: one rank, outer SGD at lr 1: co2 and eager are continuous training, the naive "
    "delayed rule is not",
    "[train][co2]") {
  // The known answer that does not mirror the code: a worker that trains rounds × H steps
  // straight, with no outer step at all. Rules that never defer a worker's own progress reduce
  // to it when the outer step is θ ← x − Δ; the naive rule replays each round one round late.
  const int rounds = 4;
  co2_setup s(1);
  // A learning rate at which a round moves θ well beyond rounding (the default schedule is
  // still warming up over these 12 steps).
  s.icfg.schedule = {.lr = 1e-2f, .min_lr = 1e-2f, .warmup = 0, .total = 100};
  auto straight = s.worker(0);
  for (int k = 0; k < rounds; ++k) straight->train();
  const auto ref = straight->state().get(plane::param);
  const outer::sgd plain{.lr = 1.0f};
  // How far a rule's θ ends from the straight worker's, as a fraction of how far that worker
  // moved from x_0.
  const auto x0 = s.a0.get(plane::param);
  float moved = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) moved = std::max(moved, std::abs(ref[i] - x0[i]));
  REQUIRE(moved > 0.01f);
  auto distance = [&](train::overlap_rule rule) {
    auto world = net::inproc::world(1);
    auto w = s.worker(0);
    train::co2_replica<net::inproc, nn::gpt, optim::adamw, outer::sgd> rep(world[0], *w, plain,
                                                                           std::nullopt, rule);
    REQUIRE(rep.run(rounds, std::chrono::seconds(30)).ok());
    REQUIRE(rep.finish(std::chrono::seconds(30)).ok());
    const auto p = w->state().get(plane::param);
    float worst = 0;
    for (std::size_t i = 0; i < p.size(); ++i) worst = std::max(worst, std::abs(p[i] - ref[i]));
    return worst / moved;
  };
  // Up to rounding: x − (x − θ) is θ only to within an ulp of x, once per round, and AdamW
  // carries that on (measured: 6e-4 of the movement; the naive rule: 0.94 of it).
  REQUIRE(distance(train::overlap_rule::co2) <= 1e-2f);
  REQUIRE(distance(train::overlap_rule::eager) <= 1e-2f);
  REQUIRE(distance(train::overlap_rule::naive_delayed) >= 0.3f);  // fails it, as documented
}

TEST_CASE("co2_replica co2: ranks carry on from their own θ and agree once the mean is in",
          "[train][co2]") {
  // With outer SGD the co2 rule telescopes: after finish() every rank holds
  // x_0 − η Σ_t mean Δ_t, so ranks that differed by their own last Δ during the run agree
  // (up to the order of their float sums); before finish they differ.
  const int K = 3, rounds = 3;
  co2_setup s(K);
  const outer::sgd plain{.lr = 0.7f};
  std::vector<std::vector<float>> mid(K), end(K);
  std::vector<status> errs(K);
  testing::inproc_world::run(K, [&](net::inproc& tr) {
    const int r = tr.rank();
    auto wp = s.worker(r);
    train::co2_replica<net::inproc, nn::gpt, optim::adamw, outer::sgd> rep(
        tr, *wp, plain, std::nullopt, train::overlap_rule::co2);
    errs[r] = rep.run(rounds, std::chrono::seconds(30));
    auto p = wp->state().get(plane::param);
    mid[r].assign(p.begin(), p.end());
    if (errs[r]) errs[r] = rep.finish(std::chrono::seconds(30));
    end[r].assign(p.begin(), p.end());
  });
  for (auto& e : errs) REQUIRE(e.ok());
  REQUIRE(mid[0] != mid[1]);
  for (int r = 1; r < K; ++r) {
    float worst = 0, scale = 0;
    for (std::size_t i = 0; i < end[0].size(); ++i) {
      worst = std::max(worst, std::abs(end[0][i] - end[r][i]));
      scale = std::max(scale, std::abs(end[0][i]));
    }
    REQUIRE(worst <= 1e-5f * scale);
  }
}

TEST_CASE("co2_replica naive delayed: replicas stay identical and equal the synchronous recursion",
          "[train][co2]") {
  const int K = 3, rounds = 4;
  co2_setup s(K);
  auto run = [&](bool by_hand) {
    std::vector<std::vector<float>> out(K), after_run(K);
    std::vector<status> errs(K);
    std::vector<train::diloco_traffic> traffic(K);
    std::vector<train::overlap_stats> overlap(K);
    std::vector<std::vector<std::size_t>> per_round(K);
    testing::inproc_world::run(K, [&](net::inproc& tr) {
      const int r = tr.rank();
      auto wp = s.worker(r);
      auto& w = *wp;
      auto p = w.state().get(plane::param);
      if (by_hand) {
        errs[r] = naive_delayed_by_hand(tr, w, s.outer, rounds);
      } else {
        train::co2_replica<net::inproc, nn::gpt, optim::adamw, outer::co2> rep(
            tr, w, s.outer, std::nullopt, train::overlap_rule::naive_delayed);
        errs[r] = rep.run(rounds, std::chrono::seconds(30),
                          [&](long, std::size_t b) { per_round[r].push_back(b); });
        after_run[r].assign(p.begin(), p.end());
        if (errs[r]) errs[r] = rep.finish(std::chrono::seconds(30));
        REQUIRE(!rep.in_flight());
        traffic[r] = rep.traffic();
        overlap[r] = rep.overlap();
      }
      out[r].assign(p.begin(), p.end());
    });
    for (auto& e : errs) REQUIRE(e.ok());
    return std::make_tuple(out, after_run, traffic, overlap, per_round);
  };
  const auto [mine, after_run, traffic, overlap, per_round] = run(false);
  const auto [hand, u1, u2, u3, u4] = run(true);
  REQUIRE(mine[0] == mine[1]);
  REQUIRE(mine[1] == mine[2]);
  REQUIRE(mine[0] == hand[0]);       // bit-identical to the recursion without overlap
  REQUIRE(after_run[0] != mine[0]);  // finish() applied the last round's Δ
  REQUIRE(!std::equal(mine[0].begin(), mine[0].end(), s.a0.get(plane::param).begin()));
  // Every round's all-reduce ran once: the fp32 ring of the plane plus the 8-byte hash check.
  const std::size_t n = s.model.layout().total();
  const std::size_t ring = collectives::allreduce_ring.cost(4 * n, K).bytes;
  for (int r = 0; r < K; ++r) {
    REQUIRE(traffic[r].rounds == rounds);
    REQUIRE(traffic[r].payload_bytes == std::size_t(rounds) * 4 * n);
    REQUIRE(per_round[r].size() == std::size_t(rounds));
    REQUIRE(per_round[r][0] == 0);  // round 0 lands nothing: its Δ is applied in round 1
    for (int k = 1; k < rounds; ++k) {
      REQUIRE(per_round[r][std::size_t(k)] >= ring);
      REQUIRE(per_round[r][std::size_t(k)] <= ring + 64);
    }
    REQUIRE(overlap[r].inner_s > 0);
    REQUIRE(overlap[r].comm_s > 0);
    REQUIRE(overlap[r].hidden() >= 0.0);
    REQUIRE(overlap[r].hidden() <= 1.0);
  }
}

TEST_CASE("co2_replica naive delayed: one round leaves θ at x_0 until finish applies its Δ",
          "[train][co2]") {
  const int K = 2;
  co2_setup s(K);
  std::vector<std::vector<float>> mid(K), end(K);
  std::vector<status> errs(K);
  testing::inproc_world::run(K, [&](net::inproc& tr) {
    const int r = tr.rank();
    auto wp = s.worker(r);
    auto& w = *wp;
    train::co2_replica<net::inproc, nn::gpt, optim::adamw, outer::co2> rep(
        tr, w, {}, std::nullopt, train::overlap_rule::naive_delayed);
    errs[r] = rep.run(1, std::chrono::seconds(30));
    auto p = w.state().get(plane::param);
    mid[r].assign(p.begin(), p.end());
    if (errs[r]) errs[r] = rep.finish(std::chrono::seconds(30));
    end[r].assign(p.begin(), p.end());
  });
  for (auto& e : errs) REQUIRE(e.ok());
  const auto p0 = s.a0.get(plane::param);
  REQUIRE(std::equal(mid[0].begin(), mid[0].end(), p0.begin()));  // x_1 = x_0
  REQUIRE(!std::equal(end[0].begin(), end[0].end(), p0.begin()));
  REQUIRE(end[0] == end[1]);
}

TEST_CASE("co2_replica: int8 with error feedback over TCP sockets", "[train][co2][tcp]") {
  const int K = 2, rounds = 3;
  co2_setup s(K);
  std::vector<std::vector<float>> out(K);
  std::vector<status> errs(K);
  std::vector<std::size_t> payload(K);
  testing::tcp_world::run(K, [&](net::asio_tcp& t) {
    const int r = t.rank();
    auto wp = s.worker(r);
    auto& w = *wp;
    auto codec = train::diloco_codec(*store::parse_compression("int8"), s.model);
    REQUIRE(codec);
    train::co2_replica<net::asio_tcp, nn::gpt, optim::adamw, outer::co2> rep(
        t, w, s.outer, std::move(*codec), train::overlap_rule::naive_delayed);
    errs[r] = rep.run(rounds, std::chrono::seconds(30));
    if (errs[r]) errs[r] = rep.finish(std::chrono::seconds(30));
    payload[r] = rep.traffic().payload_bytes;
    auto p = w.state().get(plane::param);
    out[r].assign(p.begin(), p.end());
  });
  for (auto& e : errs) REQUIRE(e.ok());
  REQUIRE(out[0] == out[1]);
  const std::size_t n = s.model.layout().total();
  REQUIRE(payload[0] > 0);
  REQUIRE(payload[0] < std::size_t(rounds) * 4 * n / 3);  // int8: about a quarter of fp32
}

TEST_CASE("co2_replica eager: equals its synchronous recursion; with one rank it is DiLoCo",
          "[train][co2]") {
  SECTION("three ranks: the same as eager updates run synchronously by hand") {
    const int K = 3, rounds = 3;
    co2_setup s(K);
    auto run = [&](bool by_hand) {
      std::vector<std::vector<float>> out(K);
      std::vector<status> errs(K);
      testing::inproc_world::run(K, [&](net::inproc& tr) {
        const int r = tr.rank();
        auto wp = s.worker(r);
        if (by_hand) {
          errs[r] = eager_by_hand(tr, *wp, s.outer, rounds);
        } else {
          train::co2_replica<net::inproc, nn::gpt, optim::adamw, outer::co2> rep(
              tr, *wp, s.outer, std::nullopt, train::overlap_rule::eager);
          errs[r] = rep.run(rounds, std::chrono::seconds(30));
          if (errs[r]) errs[r] = rep.finish(std::chrono::seconds(30));
        }
        auto p = wp->state().get(plane::param);
        out[r].assign(p.begin(), p.end());
      });
      for (auto& e : errs) REQUIRE(e.ok());
      return out;
    };
    const auto mine = run(false), hand = run(true);
    for (int r = 0; r < K; ++r) REQUIRE(mine[r] == hand[r]);
    REQUIRE(mine[0] != mine[1]);  // each rank holds its own share of the last rounds
  }
  SECTION("one rank: the same rounds as diloco_replica, up to rounding") {
    const int rounds = 3;
    co2_setup s(1);
    const outer::nesterov nest{};
    auto world = net::inproc::world(1);
    auto w_e = s.worker(0), w_d = s.worker(0);
    train::co2_replica<net::inproc, nn::gpt, optim::adamw, outer::nesterov> eager(
        world[0], *w_e, nest, std::nullopt, train::overlap_rule::eager);
    REQUIRE(eager.run(rounds, std::chrono::seconds(30)).ok());
    auto world_d = net::inproc::world(1);
    train::diloco_replica<net::inproc, nn::gpt, optim::adamw, outer::nesterov> dil(world_d[0], *w_d,
                                                                                   nest);
    REQUIRE(dil.run(rounds, std::chrono::seconds(30)).ok());
    const auto pe = w_e->state().get(plane::param), pd = w_d->state().get(plane::param);
    float worst = 0, scale = 0;
    for (std::size_t i = 0; i < pe.size(); ++i) {
      worst = std::max(worst, std::abs(pe[i] - pd[i]));
      scale = std::max(scale, std::abs(pd[i]));
    }
    REQUIRE(worst <= 1e-5f * scale);  // m + (Δ_t − m) rounds differently from Δ_t
    REQUIRE(eager.finish(std::chrono::seconds(30)).ok());  // k = 1: the correction is zero
  }
  REQUIRE(train::parse_overlap_rule("eager").value() == train::overlap_rule::eager);
  REQUIRE(train::parse_overlap_rule("co2").value() == train::overlap_rule::co2);
  REQUIRE(train::parse_overlap_rule("naive_delayed").value() == train::overlap_rule::naive_delayed);
  REQUIRE(!train::parse_overlap_rule("late"));
  const auto old = train::parse_overlap_rule("delayed");  // the old name says what became of it
  REQUIRE(!old);
  REQUIRE(old.error().message.find("'naive_delayed'") != std::string::npos);
}
