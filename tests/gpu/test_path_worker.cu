// DiPaCo path workers on the device:
//   grid      a 2×2 grid (two levels of two experts, four paths), one device worker per path on
//             threads (a context each, one GPU), against the in-process module store with int8
//             pushes, driven by the library's round body (train::run_worker) under every sync
//             rule (blocking, co2, eager, naive_delayed, streaming): every round closes with all
//             four paths in every module, every round is reported once, the loss falls; and
//             (blocking) per worker and round exactly the encoded payload bodies and the inner
//             steps' losses come down PCIe, nothing else. The store decodes the device payloads
//             with its host codecs (one wire format).
//   landing   the device worker's prepare_level and land_level give the host worker's Δ, θ and
//             θ_start bit for bit (fetched or not, σ ∈ {0, ½, 1}, α ∈ {0, ¼, 1}): dyadic values,
//             so every product and sum is exact and no rounding mode can differ
// Exits 77 without a usable CUDA device.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "gpu_test.cuh"
#include "paco/arena_cuda.cuh"
#include "paco/nn/gpt.hpp"
#include "paco/outer/sgd.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/path_worker_cuda.cuh"
#include "paco/store/local_store.hpp"
#include "paco/train/dipaco_local.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/worker_loop.hpp"

namespace pk = paco::kernels;
using gpu_test::failures;

namespace {

const paco::nn::gpt& small_gpt() {
  static const paco::nn::gpt model({.vocab = 256, .ctx = 64, .d = 64, .layers = 2, .heads = 4});
  return model;
}

void grid(const paco::train::sync_choice& rule) {
  const auto& model = small_gpt();
  paco::arena<paco::host> a0(model.layout());
  model.init(a0, 4);
  const auto levels = *paco::path::split_gpt_levels(model.layout(), 2, 2);
  const auto plan =
      *paco::path::path_plan::make(paco::path::module_grid<2>::experts({2, 2}), levels);
  paco::store::local_store<paco::outer::nesterov> store(plan.module_table(),
                                                        paco::outer::nesterov{});
  const auto int8 = paco::store::parse_compression("int8").value();
  gpu_test::ok(store.set_compression(int8, model, plan.module_spans()), "set_compression");
  paco::train::init_modules(store, plan, a0.get(paco::plane::param).data());

  const int rounds = 3, H = 10;
  const bool blocking = rule.get_if<paco::train::blocking>() != nullptr;
  std::vector<paco::io::token_stream> shards;
  for (int p = 0; p < plan.paths(); ++p) shards.push_back(gpu_test::grammar_stream(60000, 20 + p));
  std::vector<std::vector<double>> loss(plan.paths());
  std::vector<paco::status> result(plan.paths());
  std::vector<std::thread> th;
  for (int p = 0; p < plan.paths(); ++p)
    th.emplace_back([&, p] {
      try {
        paco::train::inner_config cfg{.batch = 8, .ctx = 64, .steps = H, .grad_clip = 1.0f};
        cfg.schedule = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup = 5, .total = rounds * H};
        pk::path_worker_cuda<paco::nn::gpt> w(p, model, plan.path_spans(p), plan.path_modules(p),
                                              paco::optim::adamw{.lr = 3e-3f}, cfg,
                                              shards[std::size_t(p)], 50u + p);
        auto host_codecs =
            paco::store::make_codecs(int8, model, plan.path_spans(p)).value_or_throw();
        std::vector<pk::device_codec> codecs;
        std::uint64_t bodies = 0;
        for (auto& c : host_codecs) {
          codecs.push_back(pk::device_codec::make(c.spec(), c.segments()).value_or_throw());
          bodies += codecs.back().payload_bytes() - (40 + 8 * c.segments().size());
        }
        gpu_test::ok(w.set_codecs(std::move(codecs)), "set_codecs");
        // The library's round body drives the device worker as it drives the host one.
        std::uint64_t last = 0;
        const paco::train::worker_loop_options lo{.rounds = rounds,
                                                  .round_deadline = std::chrono::minutes(2),
                                                  .sync = rule,
                                                  .sharing = {2, 2}};
        result[std::size_t(p)] =
            paco::train::run_worker(w, store, lo, [&](const paco::train::worker_round& wr) {
              const auto now = w.transfers().d2h_bytes + w.loop().transfers().d2h_bytes;
              const auto down = now - last;
              last = now;
              loss[std::size_t(p)].push_back(wr.loss);
              if (p == 0)
                std::printf(
                    "%s round %ld: path 0 loss %.4f, %llu B down (payload bodies %llu + "
                    "losses %d; fp32 Δ would be %zu B)\n",
                    rule.name().c_str(), wr.round, wr.loss, (unsigned long long)down,
                    (unsigned long long)bodies, 8 * H,
                    4 * w.state().get(paco::plane::param).size());
              if (blocking)
                EXPECT(down == bodies + 8 * H,
                       "path %d round %ld: %llu bytes came down, expected %llu", p, wr.round,
                       (unsigned long long)down, (unsigned long long)(bodies + 8 * H));
              return paco::status{};
            });
      } catch (const std::exception& e) {
        result[std::size_t(p)] = paco::status(paco::errc::unsupported, e.what());
      }
    });
  for (auto& t : th) t.join();
  for (int p = 0; p < plan.paths(); ++p) {
    const auto& s = result[std::size_t(p)];
    EXPECT(s.ok(), "%s path %d: %s", rule.name().c_str(), p,
           s.ok() ? "" : s.error().what().c_str());
    const auto& l = loss[std::size_t(p)];
    EXPECT(l.size() == rounds && l.back() < l.front(), "%s path %d: %zu reports, loss not falling",
           rule.name().c_str(), p, l.size());
  }
  for (auto& h : store.history())
    EXPECT(h.arrived == 2, "%s: module %d round %ld closed with %d of 2 paths", rule.name().c_str(),
           h.module, h.round, h.arrived);
}

// k/64 for k in [−128, 128): every product with ½ or ¼ and every sum below is exact.
std::vector<float> dyadic(std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = float(int((i * 37 + std::size_t(salt)) % 256) - 128) / 64;
  return v;
}

void landing() {
  const auto& model = small_gpt();
  const auto levels = *paco::path::split_gpt_levels(model.layout(), 2, 2);
  const auto plan =
      *paco::path::path_plan::make(paco::path::module_grid<2>::experts({1, 1}), levels);
  const std::size_t n = model.layout().total();
  paco::store::local_store<paco::outer::sgd> store(plan.module_table(), paco::outer::sgd{});
  const auto g0 = dyadic(n, 1);
  paco::train::init_modules(store, plan, g0.data());
  const auto shard = gpu_test::grammar_stream(20000, 7);
  const paco::train::inner_config cfg{.batch = 2, .ctx = 64, .steps = 2};
  paco::train::path_worker<paco::nn::gpt, paco::optim::adamw> hw(
      0, model, plan.path_spans(0), plan.path_modules(0), {}, cfg, shard, 1);
  pk::path_worker_cuda<paco::nn::gpt> dw(0, model, plan.path_spans(0), plan.path_modules(0), {},
                                         cfg, shard, 1);
  const auto stream = dw.loop().workspace().ctx.stream();
  const auto planes = [&](paco::plane pl) {
    return std::pair(std::vector<float>(hw.state().get(pl).begin(), hw.state().get(pl).end()),
                     gpu_test::host(dw.state().get(pl).data(), n));
  };
  gpu_test::ok(paco::train::pull(hw, store), "host pull");
  gpu_test::ok(paco::train::pull(dw, store), "device pull");
  struct landing_case {
    bool fetched;
    float sigma, alpha;
  };
  int salt = 2;
  for (const auto c : {landing_case{true, 0.5f, 0.25f}, landing_case{false, 1.0f, 0.0f},
                       landing_case{true, 0.0f, 1.0f}, landing_case{false, 0.5f, 0.5f}}) {
    const auto th = dyadic(n, salt++);  // θ as if trained
    std::copy(th.begin(), th.end(), hw.state().get(paco::plane::param).begin());
    gpu_test::ok(paco::upload(paco::slice<const float>(th.data(), n),
                              dw.state().get(paco::plane::param), stream),
                 "upload θ");
    for (std::size_t l = 0; l < levels.size(); ++l) {
      gpu_test::ok(hw.prepare_level(l), "host prepare_level");
      gpu_test::ok(dw.prepare_level(l), "device prepare_level");
      EXPECT(hw.buffers().delta(l) == dw.buffers().delta(l), "level %zu: Δ differs", l);
    }
    if (c.fetched) {
      gpu_test::ok(hw.buffers().fetch(store), "host fetch");
      gpu_test::ok(dw.buffers().fetch(store), "device fetch");
    }
    for (std::size_t l = 0; l < levels.size(); ++l) {
      hw.land_level(l, c.fetched, c.sigma, c.alpha);
      dw.land_level(l, c.fetched, c.sigma, c.alpha);
    }
    for (auto pl : {paco::plane::param, paco::plane::anchor}) {
      const auto [h, d] = planes(pl);
      EXPECT(h == d, "landing (fetched %d, σ %g, α %g): %s differs from the host's (worst %g)",
             int(c.fetched), double(c.sigma), double(c.alpha),
             pl == paco::plane::param ? "θ" : "θ_start", gpu_test::worst(d, h));
    }
  }
}

}  // namespace

int main() {
  if (!gpu_test::device_or_skip("the device path workers were")) return 77;
  try {
    landing();
    for (const char* rule : {"blocking", "co2", "eager", "naive_delayed", "streaming"})
      grid(paco::train::parse_sync(rule).value_or_throw());
  } catch (const std::exception& e) {
    EXPECT(false, "threw: %s", e.what());
  }
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all device path-worker tests passed",
              failures.load());
  return failures ? 1 : 0;
}
