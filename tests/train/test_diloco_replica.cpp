// train/diloco_replica.hpp: k replicas over inproc stay bit-identical, train, and count what
// they send; the rounds equal diloco_round called by hand.
#include <catch2/catch.hpp>

#include <thread>

#include "paco/collectives/allreduce_ring.hpp"
#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/diloco_replica.hpp"

using namespace paco;

TEST_CASE("diloco_replica: replicas stay identical, equal the hand-written rounds, count bytes",
          "[train][diloco]") {
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2});
  arena<host> a0(model.layout());
  model.init(a0, 6);
  const auto levels = *path::split_gpt_levels(model.layout(), 2, 1);
  const int K = 3, rounds = 3;
  std::vector<io::token_stream> shards;
  for (int r = 0; r < K; ++r) shards.push_back(testing::synthetic_stream(30 + r, 3000, 3 + r, 3));
  const train::inner_config icfg{.batch = 2, .ctx = 16, .steps = 3};
  auto run = [&](bool by_hand) {
    auto world = net::inproc::world(K);
    std::vector<std::vector<float>> out(K);
    std::vector<status> errs(K);
    std::vector<std::size_t> sent(K), per_round(K);
    std::vector<std::thread> th;
    for (int r = 0; r < K; ++r)
      th.emplace_back([&, r] {
        train::path_worker<nn::gpt, optim::adamw> w(r, model, levels, {0}, {}, icfg, shards[r],
                                                    40u + std::uint64_t(r));
        auto p = w.state().get(plane::param);
        std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), p.begin());
        if (by_hand) {
          std::vector<float> state(p.size(), 0.0f);
          for (int k = 0; k < rounds && errs[r].ok(); ++k)
            errs[r] = train::diloco_round(world[r], w, outer::nesterov{}, state);
        } else {
          train::diloco_replica<net::inproc, nn::gpt, optim::adamw, outer::nesterov> rep(
              world[r], w, outer::nesterov{});
          errs[r] = rep.run(rounds, std::chrono::seconds(30),
                            [&](long, std::size_t b) { per_round[r] = b; });
          sent[r] = rep.traffic().bytes_sent;
        }
        out[r].assign(p.begin(), p.end());
      });
    for (auto& t : th) t.join();
    for (auto& e : errs) REQUIRE(e.ok());
    return std::make_tuple(out, sent, per_round);
  };
  const auto [mine, sent, per_round] = run(false);
  const auto [hand, sent_hand, unused] = run(true);
  REQUIRE(mine[0] == mine[1]);
  REQUIRE(mine[1] == mine[2]);
  REQUIRE(mine[0] == hand[0]);  // bit-identical to diloco_round by hand
  REQUIRE(!std::equal(mine[0].begin(), mine[0].end(), a0.get(plane::param).begin()));
  // Per round: a ring all-reduce of the plane and the all-gather of 8-byte hashes.
  const std::size_t n = model.layout().total();
  const std::size_t ring = collectives::allreduce_ring.cost(4 * n, K).bytes;
  for (int r = 0; r < K; ++r) {
    REQUIRE(per_round[r] >= ring);
    REQUIRE(per_round[r] <= ring + 64);
    REQUIRE(sent[r] == 3 * per_round[r]);
  }
}
