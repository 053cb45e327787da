// Device-resident rounds: train::round_loop with kernels::learner_cuda (round_planes<cuda>).
//   device_codec   its payload is byte for byte module_codec's for the same Δ and residual (int8,
//                  int4; two rounds, the residual carried), its residual the same floats, its
//                  decode the same floats; a damaged payload is refused (corrupt)
//   rounds         two ranks (threads over net::inproc, one GPU, a context each) run 3 DiLoCo
//                  rounds of H = 10 with int8, then 2 with fp32: every round succeeds (the
//                  fingerprints agree), the loss falls, and what came down PCIe per round is
//                  exactly the encoded bytes, the fingerprint, the codec's bad-block counts and
//                  the inner steps' losses
//   rules          every sync rule (blocking, co2, eager, naive_delayed, streaming with P = 3,
//                  τ = 1, α = ½; fp32 and int8 with error feedback) with the replica on the device
//                  gives the host round loop's θ bit for bit, on both ranks: a learner whose inner
//                  step is θ ← θ − c (dyadic values, so every sum and outer step is exact and
//                  the device's fused multiply-adds cannot differ from the host's arithmetic)
// Exits 77 without a usable CUDA device.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test.cuh"
#include "paco/arena_cuda.cuh"
#include "paco/codec_cuda.cuh"
#include "paco/learner_cuda.cuh"
#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/round_planes_cuda.cuh"
#include "paco/testing/drift_learner.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/round_loop.hpp"

namespace pk = paco::kernels;
using gpu_test::dev;
using gpu_test::failures;
using gpu_test::gaussian;
using gpu_test::host;

namespace {

const paco::nn::gpt_config small{.vocab = 256, .ctx = 64, .d = 64, .layers = 2, .heads = 4};

void codec_bytes(int bits) {
  const paco::nn::gpt model(small);
  const auto spec = paco::compress::parse_compress_spec(bits == 8 ? "int8" : "int4").value();
  auto hc = paco::train::diloco_codec(paco::store::compression{spec}, model).value_or_throw();
  auto dc = pk::device_codec::make(hc.spec(), hc.segments()).value_or_throw();
  auto ctx = pk::cuda_context::make(0, 1 << 20).value_or_throw();
  const std::size_t n = hc.size();
  auto res_h = gaussian(n, 31, 1e-3f);
  auto res_d = dev(res_h);
  for (int round = 0; round < 2; ++round) {
    const auto delta = gaussian(n, 40 + round, 1e-2f);
    auto delta_d = dev(delta);
    std::vector<std::byte> out_h, out_d;
    gpu_test::ok(hc.encode(paco::slice<const float>(delta.data(), n),
                           paco::slice<float>(res_h.data(), n), out_h),
                 "host encode");
    gpu_test::ok(dc.encode(ctx, delta_d.data(), res_d.data(), out_d), "device encode");
    EXPECT(out_h == out_d, "int%d round %d: device payload (%zu B) differs from the host's (%zu B)",
           bits, round, out_d.size(), out_h.size());
    EXPECT(host(res_d) == res_h, "int%d round %d: the residuals differ", bits, round);
    std::vector<float> dec_h(n);
    gpu_test::ok(hc.decode(out_h, paco::slice<float>(dec_h.data(), n)), "host decode");
    paco::buffer<float, paco::cuda> dec_d(n);
    gpu_test::ok(dc.decode(ctx, out_d, dec_d.data()), "device decode");
    EXPECT(host(dec_d) == dec_h, "int%d round %d: the decodes differ", bits, round);
    std::printf("int%d round %d: payload %zu bytes for %zu floats (%.2f bits each)\n", bits, round,
                out_d.size(), n, 8.0 * out_d.size() / n);
  }
  std::vector<std::byte> out;
  gpu_test::ok(dc.encode(ctx, dev(gaussian(n, 50)).data(), res_d.data(), out), "encode");
  out[out.size() / 2] ^= std::byte{1};
  paco::buffer<float, paco::cuda> y(n);
  const auto s = dc.decode(ctx, out, y.data());
  EXPECT(!s && s.error().code == paco::errc::corrupt, "a damaged payload was not refused");
}

// k ranks on threads, `rounds` rounds of H steps with the codec (or fp32); returns each round's
// mean inner loss on rank 0 and checks the PCIe bytes.
std::vector<double> rounds(const char* compress, int rounds, int H) {
  const int k = 2;
  const paco::nn::gpt model(small);
  const auto shard = gpu_test::grammar_stream(200000, 9);
  paco::arena<paco::host> init(model.layout());
  model.init(init, 3);
  auto world = paco::net::inproc::world(k);
  std::vector<double> losses;
  std::vector<paco::status> result(k);
  std::vector<std::thread> th;
  for (int r = 0; r < k; ++r)
    th.emplace_back([&, r] {
      try {
        paco::train::inner_config cfg{.batch = 8, .ctx = 64, .grad_clip = 1.0f};
        cfg.schedule = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup = 10, .total = rounds * H};
        pk::inner_loop_cuda<paco::nn::gpt> loop(model, cfg, shard, 100 + r);
        paco::arena<paco::cuda> a(model.layout());
        auto st = loop.workspace().ctx.stream();
        paco::upload(init, a, paco::plane::param, st).throw_if_error();
        std::vector<pk::device_mean> means;
        std::size_t payload = 0, segments = 0;
        if (std::string(compress) != "fp32") {
          const auto spec = paco::compress::parse_compress_spec(compress).value();
          auto hc =
              paco::train::diloco_codec(paco::store::compression{spec}, model).value_or_throw();
          segments = hc.segments().size();
          means.push_back({pk::device_codec::make(hc.spec(), hc.segments()).value_or_throw(), {}});
          payload = means[0].codec->payload_bytes();
        }
        const std::size_t n = a.get(paco::plane::param).size();
        pk::learner_cuda<paco::nn::gpt> learner(loop, a, paco::optim::adamw{.lr = 3e-3f}, H);
        paco::train::round_loop<paco::net::inproc, pk::learner_cuda<paco::nn::gpt>,
                                paco::outer::nesterov, paco::train::blocking>
            rep(world[r], learner, paco::outer::nesterov{}, {}, {}, std::move(means));
        std::uint64_t last = 0;
        result[r] = rep.run(rounds, std::chrono::minutes(2), [&](const paco::train::round_end& e) {
          const std::uint64_t down = rep.planes().transfers().d2h_bytes - last;
          last = rep.planes().transfers().d2h_bytes;
          // body (or Δ) + fingerprint + the decode's per-segment bad-block counts, k payloads
          const std::uint64_t want =
              payload ? payload - (40 + 8 * segments) + 8 + k * 4 * segments : 4 * n + 8;
          if (r == 0) {
            losses.push_back(e.loss);
            std::printf(
                "%s round %ld: loss %.4f, %llu B down (+%d B of losses) for %zu floats "
                "(fp32 would be %zu B)\n",
                compress, e.round, e.loss, (unsigned long long)down, 8 * H, n, 4 * n);
          }
          EXPECT(down == want, "%s rank %d round %ld: %llu bytes came down, expected %llu",
                 compress, r, e.round, (unsigned long long)down, (unsigned long long)want);
        });
      } catch (const std::exception& e) {
        result[r] = paco::status(paco::errc::unsupported, e.what());
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < k; ++r)
    EXPECT(result[r].ok(), "%s rank %d: %s", compress, r,
           result[r].ok() ? "" : result[r].error().what().c_str());
  return losses;
}

// θ ← θ − c at every inner step (c per rank, dyadic), over the GPT layout: on the host
// (testing::drift_learner), and on the device with the same arithmetic (one subtraction a step).
using host_drift = paco::testing::drift_learner;

template <int = 0>
__global__ void drift_kernel(float* th, const float* c, std::size_t n, int steps) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    for (int s = 0; s < steps; ++s) th[i] = __fsub_rn(th[i], c[i]);
}

struct device_drift {
  pk::cuda_context ctx;
  paco::arena<paco::cuda> a;
  paco::buffer<float, paco::cuda> c;
  int h;
  explicit device_drift(host_drift& init)
      : ctx(pk::cuda_context::make(0, 1 << 20).value_or_throw()),
        a(init.a.layout()),
        c(dev(init.c)),
        h(init.h) {
    auto th = init.a.get(paco::plane::param);
    paco::upload(paco::slice<const float>(th.data(), th.size()), a.get(paco::plane::param),
                 ctx.stream())
        .throw_if_error();
    ctx.synchronize().throw_if_error();
  }
  paco::arena<paco::cuda>& state() { return a; }
  double train(int n) {
    auto th = a.get(paco::plane::param);
    drift_kernel<<<pk::elementwise_blocks(th.size()), 256, 0, ctx.stream()>>>(th.data(), c.data(),
                                                                              th.size(), n);
    return 0.0;
  }
  int steps_per_round() const { return h; }
  pk::cuda_context& context() { return ctx; }
};
static_assert(paco::train::Learner<host_drift> && paco::train::Learner<device_drift>);
static_assert(!paco::train::CheckpointedLearner<device_drift>);

// Each rank's θ after `rounds` rounds and finish(), the replica on the host or on the device.
std::vector<std::vector<float>> drift_rounds(bool device, const paco::train::sync_choice& rule,
                                             const std::vector<paco::train::fragment>& frags,
                                             const char* compress) {
  const int k = 2, h = 6, rounds = 4;
  const paco::nn::gpt model(small);
  const paco::outer::nesterov nest{.lr = 0.5f, .momentum = 0.5f};
  auto world = paco::net::inproc::world(k);
  std::vector<std::vector<float>> out(k);
  std::vector<paco::status> result(k);
  std::vector<std::thread> th;
  for (int r = 0; r < k; ++r)
    th.emplace_back([&, r] {
      try {
        host_drift hl(model.layout(), r, h);
        std::vector<paco::compress::module_codec> hc;
        if (std::string(compress) != "fp32") {
          const auto spec = paco::compress::parse_compress_spec(compress).value();
          hc = paco::train::fragment_codecs(paco::store::compression{spec}, model, frags)
                   .value_or_throw();
        }
        if (!device) {
          paco::train::round_loop<paco::net::inproc, host_drift, paco::outer::nesterov> loop(
              world[r], hl, nest, rule, frags, std::move(hc));
          result[r] = loop.run(rounds, std::chrono::minutes(1));
          if (result[r]) result[r] = loop.finish(std::chrono::minutes(1));
          auto p = hl.a.get(paco::plane::param);
          out[r].assign(p.begin(), p.end());
          return;
        }
        device_drift dl(hl);
        std::vector<pk::device_mean> means;
        for (auto& c : hc)
          means.push_back({pk::device_codec::make(c.spec(), c.segments()).value_or_throw(), {}});
        paco::train::round_loop<paco::net::inproc, device_drift, paco::outer::nesterov> loop(
            world[r], dl, nest, rule, frags, std::move(means));
        result[r] = loop.run(rounds, std::chrono::minutes(1));
        if (result[r]) result[r] = loop.finish(std::chrono::minutes(1));
        out[r] = host(dl.a.get(paco::plane::param).data(), dl.a.get(paco::plane::param).size());
      } catch (const std::exception& e) {
        result[r] = paco::status(paco::errc::unsupported, e.what());
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < k; ++r)
    EXPECT(result[r].ok(), "%s on the %s, rank %d: %s", compress, device ? "device" : "host", r,
           result[r].ok() ? "" : result[r].error().what().c_str());
  return out;
}

void rules() {
  const paco::nn::gpt model(small);
  const auto& layout = model.layout();
  std::map<std::string, int> index;
  for (std::size_t i = 0; i < layout.count(); ++i) index[layout.entry(i).name] = int(i);
  const auto three = paco::train::fragments_by(layout, 3, [&](const std::string& n) {
                       return index[n] % 3;
                     }).value_or_throw();
  const auto whole = paco::train::whole_plane(layout);
  struct row {
    const char* name;
    paco::train::sync_choice rule;
    const std::vector<paco::train::fragment>* frags;
  };
  const std::vector<row> rows{
      {"blocking", paco::train::blocking{}, &whole},
      {"co2", paco::train::co2{}, &whole},
      {"eager", paco::train::eager{}, &whole},
      {"naive_delayed", paco::train::naive_delayed{}, &whole},
      {"streaming P=3 tau=1 alpha=0.5", paco::train::streaming{.overlap = 1, .alpha = 0.5f},
       &three},
  };
  for (const char* compress : {"fp32", "int8"})
    for (auto& w : rows) {
      const auto on_host = drift_rounds(false, w.rule, *w.frags, compress);
      const auto on_device = drift_rounds(true, w.rule, *w.frags, compress);
      for (int r = 0; r < 2; ++r)
        EXPECT(!on_host[r].empty() && on_device[r] == on_host[r],
               "%s, %s, rank %d: θ on the device differs from the host's (worst %.3g)", w.name,
               compress, r, gpu_test::worst(on_device[r], on_host[r]));
      std::printf("rule %s, %s: device θ == host θ on both ranks\n", w.name, compress);
    }
}

}  // namespace

int main() {
  if (!gpu_test::device_or_skip("the device DiLoCo rounds were")) return 77;
  try {
    codec_bytes(8);
    codec_bytes(4);
    auto l = rounds("int8", 3, 10);
    EXPECT(l.size() == 3 && l.back() < l.front(), "int8: the loss did not fall over the rounds");
    auto f = rounds("fp32", 2, 10);
    EXPECT(f.size() == 2 && f.back() < f.front(), "fp32: the loss did not fall over the rounds");
    rules();
  } catch (const std::exception& e) {
    EXPECT(false, "threw: %s", e.what());
  }
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all device DiLoCo tests passed",
              failures.load());
  return failures ? 1 : 0;
}
