// DiPaCo path workers on the device: a 2×2 grid (two levels of two experts, four paths), one
// device worker per path on threads (a context each, one GPU), against the in-process module
// store with int8 pushes, driven by the library's round loop (train::run_worker). Every round
// closes with all four paths in every module; the loss falls; and per worker and round exactly the
// encoded payload bodies and the inner steps' losses come down PCIe, nothing else. The store
// decodes the device payloads with its host codecs (one wire format). Exits 77 without a usable
// CUDA device.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "gpu_test.cuh"
#include "paco/arena_cuda.cuh"
#include "paco/nn/gpt.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/path_worker_cuda.cuh"
#include "paco/store/local_store.hpp"
#include "paco/train/dipaco_local.hpp"
#include "paco/train/worker_loop.hpp"

namespace pk = paco::kernels;
using gpu_test::failures;

int main() {
  if (!gpu_test::device_or_skip("the device path workers were")) return 77;
  try {
    const paco::nn::gpt model({.vocab = 256, .ctx = 64, .d = 64, .layers = 2, .heads = 4});
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
    std::vector<paco::io::token_stream> shards;
    for (int p = 0; p < plan.paths(); ++p)
      shards.push_back(gpu_test::grammar_stream(60000, 20 + p));
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
          // The library's round loop drives the device worker as it drives the host one.
          std::uint64_t last = 0;
          const paco::train::worker_loop_options lo{.rounds = rounds,
                                                    .round_deadline = std::chrono::minutes(2)};
          result[std::size_t(p)] =
              paco::train::run_worker(w, store, lo, [&](const paco::train::worker_round& wr) {
                const auto now = w.transfers().d2h_bytes + w.loop().transfers().d2h_bytes;
                const auto down = now - last;
                last = now;
                loss[std::size_t(p)].push_back(wr.loss);
                if (p == 0)
                  std::printf(
                      "round %ld: path 0 loss %.4f, %llu B down (payload bodies %llu + "
                      "losses %d; fp32 Δ would be %zu B)\n",
                      wr.round, wr.loss, (unsigned long long)down, (unsigned long long)bodies,
                      8 * H, 4 * w.state().get(paco::plane::param).size());
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
      EXPECT(s.ok(), "path %d: %s", p, s.ok() ? "" : s.error().what().c_str());
      const auto& l = loss[std::size_t(p)];
      EXPECT(l.size() == rounds && l.back() < l.front(), "path %d: the loss did not fall", p);
    }
    for (auto& h : store.history())
      EXPECT(h.arrived == 2, "module %d round %ld closed with %d of 2 paths", h.module, h.round,
             h.arrived);
  } catch (const std::exception& e) {
    EXPECT(false, "threw: %s", e.what());
  }
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all device path-worker tests passed",
              failures.load());
  return failures ? 1 : 0;
}
