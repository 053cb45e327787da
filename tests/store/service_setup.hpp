#pragma once
// The DiPaCo-over-store-service case shared by the inproc test (tests/store), the asio_tcp test
// and the MPI run (tests/multiproc): rank 0 serves the store, ranks 1..4 train the four paths of
// a 2x2 grid; the final modules must be bit-identical to the in-process run over local_store.
// With a compression (e.g. int8), workers push encoded payloads and both stores decode them.
// With a sync rule, every worker runs it (train::run_worker against the service; the in-process
// run, train::local_run, through the round body over local_store: a second implementation of
// the store side of every rule, bit for bit).
// No test framework here: callers check what run_rank and reference_hashes return.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/store/store.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/dipaco_local.hpp"
#include "paco/train/worker_loop.hpp"

namespace paco::testing {

inline io::token_stream service_stream(std::uint64_t seed, std::size_t n = 3000) {
  return synthetic_stream(seed, n, 5, 7);
}

struct service_setup {
  static constexpr int ranks = 5;
  static constexpr int rounds = 3;
  nn::gpt model{{.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2}};
  arena<host> a0{model.layout()};
  std::vector<path::level_span> levels = *path::split_gpt_levels(model.layout(), 2, 2);
  path::path_plan plan = *path::path_plan::make(path::module_grid<2>::experts({2, 2}), levels);
  std::vector<io::token_stream> shards{service_stream(1), service_stream(2, 2000),
                                       service_stream(3), service_stream(4, 5000)};
  std::vector<train::worker_spec> ws;
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 3,
                          .grad_clip = 1.0f,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 2, .total = 9}};
  optim::adamw inner{.lr = 1e-2f};
  store::module_store<outer::nesterov> store;
  std::optional<store::compression> comp;  // none: fp32 pushes
  std::optional<train::sync_choice> rule;  // none: synchronous rounds (train::sync_round)
  // The store's options (codecs aside), and the workers' loop options of path p, set before
  // each worker runs (set: every worker runs train::run_worker, blocking unless `rule`).
  store::server_options server_opts;
  std::function<void(train::worker_loop_options&, int p)> tune;
  std::vector<store::round_summary> store_history;  // the store rank's, after it served

  service_setup() : store(plan.module_table(), outer::nesterov{}) {
    model.init(a0, 5);
    for (int p = 0; p < 4; ++p) ws.push_back({&shards[std::size_t(p)], 30u + std::uint64_t(p)});
    for (int m = 0; m < plan.modules(); ++m) {
      const auto& sp = plan.span_of(m);
      store.set(m, std::span<const float>(a0.get(plane::param).data() + sp.offset, sp.size));
    }
  }
  explicit service_setup(store::compression c) : service_setup() { comp = c; }

  // Every module's level span, by module id.
  std::vector<path::level_span> module_spans() const { return plan.module_spans(); }

  // The module hashes of the same run over local_store (threads in this process).
  std::vector<std::uint64_t> reference_hashes() {
    store::local_store<outer::nesterov> ref(plan.module_table(), outer::nesterov{});
    train::init_modules(ref, plan, a0.get(plane::param).data());
    if (comp && !ref.set_compression(*comp, model, module_spans()).ok()) return {};
    auto run = train::local_run<nn::gpt, optim::adamw, outer::nesterov>::make(ref, model, plan, ws,
                                                                              inner, cfg);
    if (!run) return {};
    if (rule) run->set_sync(*rule);
    if (!run->run(rounds)) return {};
    std::vector<std::uint64_t> h;
    for (int m = 0; m < 4; ++m) h.push_back(ref.store().hash(m));
    return h;
  }

  // Runs rank r's part over transport t: the store on rank 0, path r − 1 on ranks 1..4.
  // Returns the worker's status (and its bytes sent through *sent).
  template <class T>
  status run_rank(T& t, int r, std::size_t* sent = nullptr) {
    if (r == 0) {
      std::map<int, std::vector<int>> by_rank;
      for (int p = 0; p < 4; ++p) by_rank[p + 1] = plan.path_modules(p);
      store::server_options o = server_opts;
      if (comp) {
        auto c = store::make_codecs(*comp, model, module_spans());
        if (!c) return c.error();
        o.codecs = std::make_shared<const std::vector<compress::module_codec>>(std::move(*c));
      }
      store::server<T, outer::nesterov> server(t, store, by_rank, std::move(o));
      server.serve();
      store_history = server.history();
      return {};
    }
    const int p = r - 1;
    store::client<T> client(t, store::store_layout{{0}}, r);
    const auto lv = plan.path_spans(p);
    train::path_worker<nn::gpt, optim::adamw> w(r, model, lv, plan.path_modules(p), inner, cfg,
                                                shards[std::size_t(p)], 30u + std::uint64_t(p));
    if (comp) {
      auto c = store::make_codecs(*comp, model, lv);
      if (!c) return c.error();
      if (auto st = w.set_codecs(std::move(*c)); !st) return st;
    }
    status s;
    if (rule || tune) {
      train::worker_loop_options o{.rounds = rounds, .round_deadline = std::chrono::seconds(30)};
      if (rule) o.sync = *rule;
      for (int m : plan.path_modules(p)) o.sharing.push_back(store.info(m).paths_through);
      if (tune) tune(o, p);
      s = train::run_worker(w, client, o);
    }
    for (int k = 0; k < rounds && s.ok() && !rule && !tune; ++k)
      s = train::sync_round(w, client, std::chrono::seconds(30));
    if (sent) *sent = client.bytes_sent();
    if (s.ok()) s = client.bye();
    return s;
  }

  // Bytes one worker pushes over the run: request headers and Δ of its two modules per round
  // (fp32 floats, or the codec's payload: its size does not depend on the values).
  std::size_t expected_bytes() const {
    if (!comp)
      return rounds *
             (2 * sizeof(store::wire::request) + (levels[0].size + levels[1].size) * sizeof(float));
    auto c = store::make_codecs(*comp, model, {levels[0], levels[1]});
    if (!c) return 0;
    std::size_t per_round = 0;
    for (auto& x : *c) per_round += store::wire::push_bytes(x.payload_bytes());
    return rounds * per_round;
  }
};

}  // namespace paco::testing
