#pragma once
// The DiPaCo-over-store-service case shared by the inproc test (tests/dipaco) and the asio_tcp
// test (tests/multiproc): rank 0 serves the store, ranks 1..4 train the four paths of a 2x2 grid;
// the final modules must be bit-identical to the in-process run over local_store.

#include <catch2/catch.hpp>

#include <map>
#include <thread>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/sync/dipaco_local.hpp"
#include "paco/sync/store_service.hpp"

namespace paco::testing {

inline io::token_stream service_stream(std::uint64_t seed, std::size_t n = 3000) {
  rng r(seed);
  io::token_stream s;
  s.doc_start = {0};
  for (std::size_t i = 0; i < n; ++i) s.ids.push_back(std::int32_t((i * 5 + r.below(7)) % 64));
  return s;
}

// with_rank(r, body): runs body(transport of rank r) on its own thread's endpoint; called from
// one thread per rank. ranks must be 5.
template <class WithRank>
void dipaco_service_case(WithRank&& with_rank, int ranks) {
  REQUIRE(ranks == 5);
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2});
  arena<host> a0(model.layout());
  model.init(a0, 5);
  auto levels = *path::split_gpt_levels(model.layout(), 2, 2);
  auto grid = path::module_grid<2>::experts({2, 2});
  const std::vector<int> module_level = {0, 0, 1, 1};
  std::vector<io::token_stream> shards{service_stream(1), service_stream(2, 2000), service_stream(3),
                                       service_stream(4, 5000)};
  std::vector<sync::worker_spec> ws;
  for (int p = 0; p < 4; ++p) ws.push_back({sync::path_modules(grid, p), &shards[p], 30u + p});
  sync::inner_config cfg{.batch = 2, .ctx = 16, .steps = 3, .grad_clip = 1.0f,
                         .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 2, .total = 9}};
  optim::adamw inner{.lr = 1e-2f};
  const int rounds = 3;

  // Reference: threads over local_store.
  sync::local_store<outer::nesterov> ref(sync::grid_modules(grid, levels, ws), outer::nesterov{});
  sync::init_modules(ref, levels, module_level, a0.get(plane::param).data());
  REQUIRE(sync::run_local(ref, model, levels, module_level, ws, inner, cfg, rounds).ok());

  path::module_store<outer::nesterov> store(sync::grid_modules(grid, levels, ws), outer::nesterov{});
  for (int m = 0; m < 4; ++m) {
    const auto& sp = levels[module_level[m]];
    store.set(m, std::span<const float>(a0.get(plane::param).data() + sp.offset, sp.size));
  }
  std::map<int, std::vector<int>> by_rank;
  for (int p = 0; p < 4; ++p) by_rank[p + 1] = ws[p].modules;
  std::vector<status> errs(4);
  std::vector<std::size_t> sent(4);
  std::vector<std::thread> th;
  for (int r = 0; r < 5; ++r)
    th.emplace_back([&, r] {
      with_rank(r, [&](auto& t) {
        if (r == 0) {
          sync::store_server server(t, store, by_rank);
          server.serve();
          return;
        }
        const int p = r - 1;
        sync::store_client client(t, sync::store_layout{{0}}, r);
        std::vector<path::level_span> lv{levels[0], levels[1]};
        sync::path_worker<nn::gpt, optim::adamw> w(r, model, lv, ws[p].modules, inner, cfg,
                                                   shards[p], 30u + p);
        for (int k = 0; k < rounds && errs[p].ok(); ++k)
          errs[p] = w.run_round(client, std::chrono::seconds(30));
        sent[p] = client.bytes_sent();
        if (errs[p].ok()) errs[p] = client.bye();
      });
    });
  for (auto& t : th) t.join();
  for (auto& e : errs) REQUIRE(e.ok());
  for (int m = 0; m < 4; ++m) {
    REQUIRE(store.round(m) == rounds);
    REQUIRE(store.hash(m) == ref.store().hash(m));  // bit-identical θ
  }
  // Each worker pushed its two modules every round: header + Δ bytes.
  REQUIRE(sent[0] == rounds * (2 * sizeof(sync::store_wire::request) +
                               (levels[0].size + levels[1].size) * sizeof(float)));
}

}  // namespace paco::testing
