// train/streaming_replica.hpp and train/fragments.hpp: Streaming DiLoCo's known answers
// (ALGORITHMS.md §6.4) over inproc and real TCP sockets — one fragment without overlap is
// DiLoCo bit for bit; α = 1 leaves θ to train alone; the staggered schedule sends one fragment
// every H/P steps, each every H; the replicas' global copies stay identical with overlap and
// compression; bad configs are refused with a clear error.
#include <catch2/catch.hpp>

#include <memory>
#include <thread>

#include "../net/tcp_world.hpp"
#include "../net/world.hpp"
#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/diloco_replica.hpp"
#include "paco/train/streaming_replica.hpp"

using namespace paco;

namespace {

using worker_t = train::path_worker<nn::gpt, optim::adamw>;
using streaming_t = train::streaming_replica<net::inproc, nn::gpt, optim::adamw, outer::nesterov>;

struct stream_setup {
  static constexpr int layers = 4;
  nn::gpt model{{.vocab = 64, .ctx = 16, .d = 16, .layers = layers, .heads = 2}};
  arena<host> a0{model.layout()};
  std::vector<path::level_span> levels;
  std::vector<io::token_stream> shards;
  train::inner_config icfg{.batch = 2, .ctx = 16, .steps = 4};

  explicit stream_setup(int k) {
    model.init(a0, 9);
    levels = *path::split_gpt_levels(model.layout(), layers, 1);
    for (int r = 0; r < k; ++r) shards.push_back(testing::synthetic_stream(50 + r, 3000, 3 + r, 3));
  }
  std::unique_ptr<worker_t> worker(int r) const {
    auto w = std::make_unique<worker_t>(r, model, levels, std::vector<int>{0}, optim::adamw{}, icfg,
                                        shards[std::size_t(r)], 70u + std::uint64_t(r));
    auto p = w->state().get(plane::param);
    std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), p.begin());
    return w;
  }
  std::vector<train::fragment> fragments(int block_fragments) const {
    return *train::gpt_fragments(model.layout(), layers, block_fragments,
                                 train::fragment_order::strided);
  }
};

std::vector<float> plane_of(worker_t& w) {
  auto p = w.state().get(plane::param);
  return {p.begin(), p.end()};
}

}  // namespace

TEST_CASE("gpt_fragments: strided and sequential blocks, the rest in fragment 0",
          "[train][streaming]") {
  stream_setup s(1);
  const auto& layout = s.model.layout();
  auto names = [](const train::fragment& f) {
    std::vector<std::string> v;
    for (auto& sp : f.spans) v.insert(v.end(), sp.entries.begin(), sp.entries.end());
    return v;
  };
  const auto st = s.fragments(2);
  REQUIRE(st.size() == 3);
  REQUIRE(names(st[1]) == std::vector<std::string>{"block.0", "block.2"});
  REQUIRE(names(st[2]) == std::vector<std::string>{"block.1", "block.3"});
  REQUIRE(st[0].spans.size() == 2);  // embed … ln_f (and head): two spans
  REQUIRE(names(st[0]).front() == "embed");
  const auto sq = *train::gpt_fragments(layout, 4, 2, train::fragment_order::sequential);
  REQUIRE(names(sq[1]) == std::vector<std::string>{"block.0", "block.1"});
  REQUIRE(sq[1].spans.size() == 1);  // consecutive blocks share a span
  REQUIRE(train::check_fragments(layout, st).ok());
  std::size_t total = 0;
  for (auto& f : st) total += f.size();
  REQUIRE(total <= layout.total());
  // Errors name the problem.
  REQUIRE(!train::gpt_fragments(layout, 4, 5, train::fragment_order::strided));
  REQUIRE(!train::parse_fragment_order("zigzag"));
  auto missing = st;
  missing.pop_back();
  const auto e = train::check_fragments(layout, missing);
  REQUIRE(!e);
  REQUIRE(e.error().message.find("block.1") != std::string::npos);
}

TEST_CASE("streaming_config: H a multiple of P, τ < H/P, α in [0, 1]", "[train][streaming]") {
  REQUIRE(train::streaming_config{.sync_every = 6, .overlap = 1}.validate(3).ok());
  REQUIRE(!train::streaming_config{.sync_every = 7}.validate(3));
  const auto e = train::streaming_config{.sync_every = 6, .overlap = 2}.validate(3);
  REQUIRE(!e);
  REQUIRE(e.error().message.find("overlap") != std::string::npos);
  REQUIRE(!train::streaming_config{.sync_every = 6, .alpha = 1.5f}.validate(3));
  // run() refuses a bad config before training.
  stream_setup s(1);
  auto world = net::inproc::world(1);
  auto w = s.worker(0);
  streaming_t r(world[0], *w, outer::nesterov{}, s.fragments(2), {.sync_every = 4});
  const auto st = r.run(4, std::chrono::seconds(5));
  REQUIRE(!st);
  REQUIRE(st.error().code == errc::invalid_argument);
  REQUIRE(r.step() == 0);
  // … and codecs that do not match the fragments one for one.
  auto codecs = train::fragment_codecs(*store::parse_compression("int8"), s.model, s.fragments(2));
  REQUIRE(codecs);
  codecs->pop_back();
  streaming_t short_of_codecs(world[0], *w, outer::nesterov{}, s.fragments(2), {.sync_every = 6},
                              std::move(*codecs));
  const auto sc = short_of_codecs.run(6, std::chrono::seconds(5));
  REQUIRE(!sc);
  REQUIRE(sc.error().message.find("one codec per fragment") != std::string::npos);
}

TEST_CASE("streaming_replica: one fragment, no overlap, α = 0 is DiLoCo bit for bit",
          "[train][streaming]") {
  const int K = 2, rounds = 3;
  stream_setup s(K);
  const auto one = *train::fragments_by(s.model.layout(), 1, [](const std::string&) { return 0; });
  auto run = [&](bool streaming) {
    std::vector<std::vector<float>> out(K);
    std::vector<status> errs(K);
    testing::inproc_world::run(K, [&](net::inproc& tr) {
      const int r = tr.rank();
      auto w = s.worker(r);
      if (streaming) {
        streaming_t rep(tr, *w, outer::nesterov{}, one, {.sync_every = s.icfg.steps});
        errs[r] = rep.run(long(rounds) * s.icfg.steps, std::chrono::seconds(30));
        if (errs[r]) errs[r] = rep.finish(std::chrono::seconds(30));
        REQUIRE(rep.traffic().rounds == rounds);  // finish() had nothing left to sync
      } else {
        train::diloco_replica<net::inproc, nn::gpt, optim::adamw, outer::nesterov> rep(
            tr, *w, outer::nesterov{});
        errs[r] = rep.run(rounds, std::chrono::seconds(30));
      }
      out[r] = plane_of(*w);
    });
    for (auto& e : errs) REQUIRE(e.ok());
    return out;
  };
  const auto st = run(true), dl = run(false);
  REQUIRE(st[0] == st[1]);
  REQUIRE(st[0] == dl[0]);
}

TEST_CASE("streaming_replica: α = 1 leaves θ to train alone", "[train][streaming]") {
  const int K = 2, steps = 24;
  stream_setup s(K);
  std::vector<std::vector<float>> out(K), g(K);
  std::vector<status> errs(K);
  testing::inproc_world::run(K, [&](net::inproc& tr) {
    const int r = tr.rank();
    auto w = s.worker(r);
    streaming_t rep(tr, *w, outer::nesterov{}, s.fragments(2),
                    {.sync_every = 6, .overlap = 1, .alpha = 1.0f});
    errs[r] = rep.run(steps, std::chrono::seconds(30));
    out[r] = plane_of(*w);
    auto a = w->state().get(plane::anchor);
    g[r].assign(a.begin(), a.end());
    if (errs[r]) errs[r] = rep.finish(std::chrono::seconds(30));
  });
  for (auto& e : errs) REQUIRE(e.ok());
  auto alone = s.worker(0);
  alone->train(steps);
  REQUIRE(out[0] == plane_of(*alone));  // the local weights never took the global value
  REQUIRE(g[0] == g[1]);                // … while the global copy evolved, the same on both
  REQUIRE(!std::equal(g[0].begin(), g[0].end(), s.a0.get(plane::param).begin()));
}

TEST_CASE("streaming_replica: staggered schedule, one fragment on the wire at a time",
          "[train][streaming]") {
  const int K = 2, H = 6, tau = 1, steps = 30;  // P = 3 fragments: c = 2
  stream_setup s(K);
  std::vector<std::vector<train::fragment_sync>> syncs(K);
  std::vector<std::vector<float>> out(K);
  std::vector<status> errs(K);
  std::vector<std::size_t> fragment_bytes;
  for (auto& f : s.fragments(2)) fragment_bytes.push_back(4 * f.size());
  testing::inproc_world::run(K, [&](net::inproc& tr) {
    const int r = tr.rank();
    auto w = s.worker(r);
    streaming_t rep(tr, *w, outer::nesterov{}, s.fragments(2),
                    {.sync_every = H, .overlap = tau, .alpha = 0.5f});
    errs[r] = rep.run(steps, std::chrono::seconds(30),
                      [&](const train::fragment_sync& f) { syncs[r].push_back(f); });
    if (errs[r]) errs[r] = rep.finish(std::chrono::seconds(30));
    REQUIRE(!rep.in_flight());
    out[r] = plane_of(*w);
  });
  for (auto& e : errs) REQUIRE(e.ok());
  REQUIRE(out[0] == out[1]);  // finish(): every rank holds the outer parameters
  // Fragment p sends at H + p·c, then every H; the mean lands τ steps later.
  const auto& v = syncs[0];
  REQUIRE(v.size() == 12);  // sent at 6, 8, …, 28 (the send at 30 lands in finish())
  for (std::size_t i = 0; i < v.size(); ++i) {
    REQUIRE(v[i].sent_at == long(H + 2 * i));
    REQUIRE(v[i].fragment == int(i % 3));
    REQUIRE(v[i].applied_at == v[i].sent_at + tau);
    // The fp32 ring of that fragment alone (K = 2: each rank sends its size), plus the hash.
    REQUIRE(v[i].bytes_sent >= fragment_bytes[std::size_t(v[i].fragment)]);
    REQUIRE(v[i].bytes_sent <= fragment_bytes[std::size_t(v[i].fragment)] + 64);
  }
}

TEST_CASE("streaming_replica: int8 with error feedback over TCP sockets",
          "[train][streaming][tcp]") {
  const int K = 2;
  stream_setup s(K);
  const auto frags = s.fragments(2);
  std::vector<std::vector<float>> out(K);
  std::vector<status> errs(K);
  std::vector<std::size_t> payload(K);
  testing::tcp_world::run(K, [&](net::asio_tcp& t) {
    const int r = t.rank();
    auto w = s.worker(r);
    auto codecs = train::fragment_codecs(*store::parse_compression("int8"), s.model, frags);
    REQUIRE(codecs);
    train::streaming_replica<net::asio_tcp, nn::gpt, optim::adamw, outer::nesterov> rep(
        t, *w, outer::nesterov{}, frags, {.sync_every = 6, .overlap = 1}, std::move(*codecs));
    errs[r] = rep.run(18, std::chrono::seconds(30));
    if (errs[r]) errs[r] = rep.finish(std::chrono::seconds(30));
    payload[r] = rep.traffic().payload_bytes;
    out[r] = plane_of(*w);
  });
  for (auto& e : errs) REQUIRE(e.ok());
  REQUIRE(out[0] == out[1]);
  REQUIRE(payload[0] > 0);
}
