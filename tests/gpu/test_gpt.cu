// The whole GPT on the device against paco's host GPT (which matches PyTorch, tests/parity), on
// the same weights and tokens: loss, logits and the gradient of every layout entry; then 200
// AdamW steps of the host inner loop and the device one from the same θ on the same batches.
// Tolerances (norm-relative, ‖dev − host‖/‖host‖):
//   fp32 GEMMs   loss 1e-5, logits 1e-5, every gradient entry 1e-4 (sums in another order)
//   tf32 GEMMs   loss 2e-3, logits 5e-3, every gradient entry 3e-2 (10-bit mantissa products)
//   bf16 GEMMs   loss 1e-2, logits 3e-2, every gradient entry 1e-1 (8-bit mantissa operands)
//   200 steps    fp32: every step's loss within 1% of the host's (the curves agree; AdamW's
//                normalised updates let last-bit differences grow over steps)
// Exits 77 without a usable CUDA device.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test.cuh"
#include "paco/arena_cuda.cuh"
#include "paco/inner_loop_cuda.cuh"
#include "paco/nn/gpt.hpp"
#include "paco/nn/lm_cuda.cuh"
#include "paco/train/inner_loop.hpp"

namespace pk = paco::kernels;
using gpu_test::dev;
using gpu_test::failures;
using gpu_test::host;
using gpu_test::rel_l2;

namespace {

struct tolerances {
  double loss, logits, grad;
};

std::vector<std::int32_t> random_ids(std::size_t n, int vocab, std::uint64_t seed) {
  paco::rng g(seed);
  std::vector<std::int32_t> v(n);
  for (auto& t : v) t = std::int32_t(g.below(std::uint64_t(vocab)));
  return v;
}

void parity(const paco::nn::gpt_config& cfg, paco::nn::dims d, pk::gemm_math math,
            const tolerances& tol, const char* what) {
  const paco::nn::gpt model(cfg);
  paco::arena<paco::host> a(model.layout());
  model.init(a, 7);
  const std::size_t N = d.rows();
  const auto x = random_ids(N, cfg.vocab, 8), y = random_ids(N, cfg.vocab, 9);

  auto ws = model.make_workspace(d);
  const double host_loss_fwd = model.loss(a.get(paco::plane::param).data(), x.data(), y.data(), ws);
  const std::vector<float> host_logits(ws.logits.data(), ws.logits.data() + N * cfg.vocab);
  auto hg = a.get(paco::plane::grad);
  std::fill(hg.begin(), hg.end(), 0.0f);
  const double host_loss =
      model.forward_backward(a.get(paco::plane::param).data(), hg.data(), x.data(), y.data(), ws);
  const std::vector<float> host_grad(hg.begin(), hg.end());

  paco::arena<paco::cuda> da(model.layout());
  auto dw = pk::make_lm_workspace(model, d).value_or_throw();
  dw.ctx.set_math(math);
  gpu_test::ok(paco::upload(a, da, paco::plane::param, dw.ctx.stream()), "upload θ");
  gpu_test::ok(da.zero(paco::plane::grad, dw.ctx.stream()), "zero ∇");
  auto gx = dev(x), gy = dev(y);
  pk::forward(model, da.get(paco::plane::param).data(), gx.data(), dw);
  const auto dev_logits = host(dw.logits.data(), N * cfg.vocab);
  const double dev_loss =
      pk::forward_backward(model, da.get(paco::plane::param).data(),
                           da.get(paco::plane::grad).data(), gx.data(), gy.data(), dw);
  const auto dev_grad = host(da.get(paco::plane::grad).data(), host_grad.size());

  const double el = std::fabs(dev_loss - host_loss) / host_loss;
  const double elog = rel_l2(dev_logits, host_logits);
  std::printf("%s: loss %.7f vs %.7f (rel %.1e, forward-only host %.7f), logits %.1e\n", what,
              dev_loss, host_loss, el, host_loss_fwd, elog);
  EXPECT(el <= tol.loss, "%s loss rel %g > %g", what, el, tol.loss);
  EXPECT(elog <= tol.logits, "%s logits rel %g > %g", what, elog, tol.logits);
  double worst = 0;
  const auto& L = model.layout();
  for (std::size_t i = 0; i < L.count(); ++i) {
    const auto& e = L.entry(i);
    const double eg = rel_l2(dev_grad, host_grad, e.offset, e.offset + e.size);
    worst = std::fmax(worst, eg);
    EXPECT(eg <= tol.grad, "%s ∇%s rel %g > %g", what, e.name.c_str(), eg, tol.grad);
  }
  std::printf("%s: worst gradient entry rel %.1e over %zu entries\n", what, worst, L.count());
}

void curves() {
  const paco::nn::gpt model({.vocab = 256, .ctx = 64, .d = 64, .layers = 2, .heads = 4});
  const auto shard = gpu_test::grammar_stream(200000, 3);
  paco::train::inner_config cfg{.batch = 8, .ctx = 64, .steps = 200, .grad_clip = 1.0f};
  cfg.schedule = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup = 20, .total = 200};
  const paco::optim::adamw opt{.lr = 3e-3f};

  paco::arena<paco::host> ha(model.layout());
  model.init(ha, 11);
  paco::arena<paco::cuda> da(model.layout());
  pk::inner_loop_cuda<paco::nn::gpt> dloop(model, cfg, shard, 5);
  dloop.workspace().ctx.set_math(pk::gemm_math::fp32);
  gpu_test::ok(paco::upload(ha, da, paco::plane::param, dloop.workspace().ctx.stream()), "upload");
  paco::train::inner_loop<paco::nn::gpt, paco::optim::adamw> hloop(model, cfg, shard, 5);

  std::vector<double> hl, dl;
  hloop.run(ha, opt, cfg.steps, [&](long, double l) { hl.push_back(l); });
  dloop.run(da, opt, cfg.steps, [&](long, double l) { dl.push_back(l); });
  double worst = 0;
  for (std::size_t i = 0; i < hl.size(); ++i)
    worst = std::fmax(worst, std::fabs(dl[i] - hl[i]) / hl[i]);
  const auto theta_d = host(da.get(paco::plane::param).data(), ha.get(paco::plane::param).size());
  const std::vector<float> theta_h(ha.get(paco::plane::param).begin(),
                                   ha.get(paco::plane::param).end());
  std::printf(
      "200 steps: loss %.4f → %.4f (host) / %.4f → %.4f (device); worst step rel %.1e; "
      "final θ rel %.1e; per step %llu B up, %llu B down\n",
      hl.front(), hl.back(), dl.front(), dl.back(), worst, rel_l2(theta_d, theta_h),
      (unsigned long long)(dloop.transfers().h2d_bytes / cfg.steps),
      (unsigned long long)(dloop.transfers().d2h_bytes / cfg.steps));
  EXPECT(hl.back() < 0.6 * hl.front(), "the host curve did not learn: %g → %g", hl.front(),
         hl.back());
  EXPECT(worst <= 1e-2, "loss curves differ: worst step rel %g", worst);
}

}  // namespace

int main() {
  if (!gpu_test::device_or_skip("the device GPT was")) return 77;
  try {
    const paco::nn::gpt_config small{.vocab = 256, .ctx = 64, .d = 64, .layers = 2, .heads = 4};
    parity(small, {4, 64}, pk::gemm_math::fp32, {1e-5, 1e-5, 1e-4}, "gpt fp32");
    auto tied = small;
    tied.tie_weights = true;
    parity(tied, {3, 50}, pk::gemm_math::fp32, {1e-5, 1e-5, 1e-4}, "gpt tied fp32");
    const paco::nn::gpt_config wider{.vocab = 256, .ctx = 128, .d = 128, .layers = 3, .heads = 4};
    parity(wider, {4, 128}, pk::gemm_math::fp32, {1e-5, 1e-5, 1e-4}, "gpt d=128 fp32");
    parity(wider, {4, 128}, pk::gemm_math::tf32, {2e-3, 5e-3, 3e-2}, "gpt d=128 tf32");
    parity(wider, {4, 128}, pk::gemm_math::bf16, {1e-2, 3e-2, 1e-1}, "gpt d=128 bf16");
    curves();
  } catch (const std::exception& e) {
    EXPECT(false, "threw: %s", e.what());
  }
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all device GPT tests passed",
              failures.load());
  return failures ? 1 : 0;
}
