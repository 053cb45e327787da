// Every device twin of an nn module (kernels/paco/nn/) against its host module on the same
// inputs and weights (ggml's "every op on every backend"): forward outputs, caches, dx and dθ.
// Tolerances: exact where both sides add the same floats in the same order (embedding);
// relative 2e-5 where libm and CUDA's tanhf/expf/rsqrtf differ in the last bits (gelu,
// layer_norm, cross-entropy). Exits 77 without a usable CUDA device.
#include <cmath>
#include <cstdio>
#include <vector>

#include "gpu_test.cuh"
#include "paco/arena_cuda.cuh"
#include "paco/core/rng.hpp"
#include "paco/nn/causal_attention.hpp"
#include "paco/nn/cross_entropy.hpp"
#include "paco/nn/dispatch.cuh"
#include "paco/nn/embedding.hpp"
#include "paco/nn/gelu.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/nn/layer_norm.hpp"
#include "paco/nn/nn.cuh"
#include "paco/nn/repeat.hpp"

namespace pk = paco::kernels;
using gpu_test::failures;
using gpu_test::ok;

namespace {

cudaStream_t st = nullptr;
using gpu_test::dev;
using gpu_test::gaussian;
using gpu_test::host;
using gpu_test::rel_l2;
using gpu_test::worst;

const paco::nn::dims d{4, 33};  // 132 rows: not a multiple of 8 rows per block or 32 lanes
const int N = d.rows();

void test_gelu() {
  const int C = 100;
  paco::nn::gelu m{C};
  paco::nn::context ctx;
  const auto x = gaussian(std::size_t(N) * C, 1, 2.0f), dy = gaussian(x.size(), 2);
  std::vector<float> y(x.size()), dx = gaussian(x.size(), 3);  // dx accumulates
  auto dx0 = dx;
  m.forward<float>(nullptr, x.data(), y.data(), nullptr, d, ctx);
  m.backward<float>(nullptr, x.data(), dy.data(), dx.data(), nullptr, nullptr, d, ctx);
  auto gx = dev(x), gy = dev(y), gdy = dev(dy), gdx = dev(dx0);
  ok(pk::nn::gelu_forward(gx.data(), gy.data(), x.size(), st), "gelu_forward");
  ok(pk::nn::gelu_backward(gx.data(), gdy.data(), gdx.data(), x.size(), st), "gelu_backward");
  EXPECT(worst(host(gy), y) <= 2e-5, "gelu y: %g", worst(host(gy), y));
  EXPECT(worst(host(gdx), dx) <= 2e-5, "gelu dx: %g", worst(host(gdx), dx));
}

void test_layer_norm() {
  for (int C : {64, 100, 768}) {
    paco::nn::layer_norm m{C};
    paco::nn::context ctx;
    auto theta = gaussian(m.param_count(), 4, 0.5f);
    for (int c = 0; c < C; ++c) theta[c] += 1.0f;  // γ near 1
    const auto x = gaussian(std::size_t(N) * C, 5, 3.0f), dy = gaussian(x.size(), 6);
    std::vector<float> y(x.size()), cache(m.cache_size(d)), dx = gaussian(x.size(), 7),
                                                            dth = gaussian(theta.size(), 8);
    auto dx0 = dx, dth0 = dth;
    m.forward(theta.data(), x.data(), y.data(), cache.data(), d, ctx);
    m.backward(theta.data(), x.data(), dy.data(), dx.data(), dth.data(), cache.data(), d, ctx);
    auto gt = dev(theta), gx = dev(x), gy = dev(y), gc = dev(cache), gdy = dev(dy), gdx = dev(dx0),
         gdt = dev(dth0);
    ok(pk::nn::layer_norm_forward(gt.data(), gx.data(), gy.data(), gc.data(), N, C, m.eps, st),
       "layer_norm_forward");
    paco::buffer<float, paco::cuda> partial(pk::nn::column_sums_floats(N, C, 2));
    ok(pk::nn::layer_norm_backward(gt.data(), gx.data(), gdy.data(), gdx.data(), gdt.data(),
                                   gc.data(), N, C, partial.data(), st),
       "layer_norm_backward");
    EXPECT(worst(host(gy), y) <= 2e-5, "layer_norm C=%d y: %g", C, worst(host(gy), y));
    EXPECT(worst(host(gc), cache) <= 2e-5, "layer_norm C=%d cache: %g", C, worst(host(gc), cache));
    EXPECT(worst(host(gdx), dx) <= 2e-5, "layer_norm C=%d dx: %g", C, worst(host(gdx), dx));
    EXPECT(worst(host(gdt), dth) <= 2e-5, "layer_norm C=%d dθ: %g", C, worst(host(gdt), dth));
  }
}

void test_embedding() {
  const int V = 256, ctxlen = 40, C = 48;
  paco::nn::embedding m{.V = V, .ctx = ctxlen, .C = C};
  paco::nn::context ctx;
  const auto theta = gaussian(m.param_count(), 9, 0.02f), dy = gaussian(std::size_t(N) * C, 10);
  std::vector<std::int32_t> x(static_cast<std::size_t>(N));
  paco::rng g(11);
  for (auto& t : x) t = std::int32_t(g.below(7));  // few distinct ids: many repeats to sum
  std::vector<float> y(std::size_t(N) * C), dth(theta.size(), 0.0f);
  m.forward<float>(theta.data(), x.data(), y.data(), nullptr, d, ctx);
  m.backward<float>(theta.data(), x.data(), dy.data(), nullptr, dth.data(), nullptr, d, ctx);
  auto gt = dev(theta), gy = dev(y), gdy = dev(dy), gdt = dev(dth);
  auto gx = dev(x);
  ok(pk::nn::embedding_forward(gt.data(), gx.data(), gy.data(), d.B, d.T, V, C, st),
     "embedding_forward");
  const std::size_t sb = pk::nn::embedding_backward_scratch_bytes(d.rows(), V);
  paco::buffer<std::byte, paco::cuda> scratch(sb);
  ok(pk::nn::embedding_backward(gx.data(), gdy.data(), gdt.data(), d.B, d.T, V, C, scratch.data(),
                                sb, st),
     "embedding_backward");
  EXPECT(host(gy) == y, "embedding y differs");
  EXPECT(host(gdt) == dth, "embedding dθ differs (same additions in the same order)");
}

void test_cross_entropy() {
  for (int V : {256, 1000}) {
    const auto logits = gaussian(std::size_t(N) * V, 12, 3.0f);
    std::vector<std::int32_t> t(static_cast<std::size_t>(N));
    paco::rng g(13);
    for (auto& y : t) y = std::int32_t(g.below(std::uint64_t(V)));
    std::vector<float> dl(logits.size());
    const double want = paco::nn::cross_entropy(logits.data(), t.data(), dl.data(), N, V, 0.5f);
    auto gl = dev(logits), gdl = dev(std::vector<float>(logits.size()));
    auto gt = dev(t);
    paco::buffer<float, paco::cuda> rows(static_cast<std::size_t>(N));
    paco::buffer<double, paco::cuda> loss(1);
    ok(pk::nn::cross_entropy(gl.data(), gt.data(), gdl.data(), N, V, 0.5f, rows.data(), loss.data(),
                             st),
       "cross_entropy");
    const double got = host(loss)[0];
    EXPECT(std::fabs(got - want) <= 2e-5 * std::fabs(want), "cross_entropy V=%d loss %.8f vs %.8f",
           V, got, want);
    EXPECT(worst(host(gdl), dl) <= 2e-5, "cross_entropy V=%d dlogits: %g", V, worst(host(gdl), dl));
    // dlogits may alias logits, as on the host.
    ok(pk::nn::cross_entropy(gl.data(), gt.data(), gl.data(), N, V, 0.5f, rows.data(), loss.data(),
                             st),
       "cross_entropy in place");
    EXPECT(worst(host(gl), dl) <= 2e-5, "cross_entropy V=%d in place: %g", V, worst(host(gl), dl));
  }
}

// A module's forward and backward on both backends from the same θ, x, dy (dx and dθ start
// from the same non-zero values: both accumulate), through the dispatch the composites use.
// Returns the worst norm-relative error over y, dx and dθ.
template <class M>
double both_backends(const M& m, pk::cuda_context& dc, paco::nn::dims dd, const char* what,
                     double tol) {
  paco::nn::context hc;
  hc.reserve(m.scratch_bytes(dd));
  dc.reserve(m.scratch_bytes(dd));
  const std::size_t n_in = std::size_t(dd.rows()) * m.in_width(),
                    n_out = std::size_t(dd.rows()) * m.out_width();
  const auto theta = gaussian(m.param_count(), 21, 0.1f), x = gaussian(n_in, 22),
             dy = gaussian(n_out, 23);
  std::vector<float> y(n_out), cache(m.cache_size(dd)), dx = gaussian(n_in, 24),
                                                        dth = gaussian(theta.size(), 25, 0.01f);
  auto gdx = dev(dx), gdt = dev(dth);
  paco::nn::module_forward(m, theta.data(), x.data(), y.data(), cache.data(), dd, hc);
  paco::nn::module_backward(m, theta.data(), x.data(), dy.data(), dx.data(), dth.data(),
                            static_cast<const float*>(cache.data()), dd, hc);
  auto gt = dev(theta), gx = dev(x), gdy = dev(dy), gy = dev(std::vector<float>(n_out)),
       gc = dev(std::vector<float>(cache.size()));
  try {
    module_forward(m, static_cast<const float*>(gt.data()), static_cast<const float*>(gx.data()),
                   gy.data(), gc.data(), dd, dc);
    module_backward(m, static_cast<const float*>(gt.data()), static_cast<const float*>(gx.data()),
                    static_cast<const float*>(gdy.data()), gdx.data(), gdt.data(),
                    static_cast<const float*>(gc.data()), dd, dc);
  } catch (const std::exception& e) {
    EXPECT(false, "%s threw: %s", what, e.what());
    return INFINITY;
  }
  const double ey = rel_l2(host(gy), y), edx = rel_l2(host(gdx), dx), edt = rel_l2(host(gdt), dth);
  std::printf("  %-28s y %.2e  dx %.2e  dθ %.2e\n", what, ey, edx, edt);
  EXPECT(ey <= tol && edx <= tol && edt <= tol, "%s beyond %g", what, tol);
  return std::fmax(ey, std::fmax(edx, edt));
}

// linear, lm_head, causal attention and a whole transformer block (seq, residual through the
// dispatch) in fp32 GEMM mode (sums differ from the host's in order only), then in bf16 mode.
void test_gemm_modules() {
  auto dc = pk::cuda_context::make().value_or_throw();
  dc.set_math(pk::gemm_math::fp32);
  using namespace paco::nn;
  both_backends(linear{.in = 100, .out = 72}, dc, d, "linear", 2e-5);
  both_backends(linear{.in = 64, .out = 48, .bias = false}, dc, d, "linear (no bias)", 2e-5);
  both_backends(lm_head{.C = 64, .V = 256}, dc, d, "lm_head", 2e-5);
  const dims da{3, 40};
  both_backends(causal_attention{.C = 48, .NH = 4}, dc, da, "causal_attention", 2e-5);
  both_backends(causal_attention{.C = 64, .NH = 1}, dc, dims{2, 70}, "causal_attention NH=1", 2e-5);
  both_backends(make_block(48, 4, 192, 0.1f, 0.1f), dc, da, "transformer_block", 5e-5);
  both_backends(repeat<transformer_block>{make_block(48, 4, 192, 0.1f, 0.1f), 2}, dc, da,
                "repeat<transformer_block>", 5e-5);
  // bf16 operands (8-bit mantissas, fp32 sums): ≈ 2^-9 relative per operand, 1e-2 allowed.
  dc.set_math(pk::gemm_math::bf16);
  both_backends(linear{.in = 100, .out = 72}, dc, d, "linear bf16", 1e-2);
  both_backends(lm_head{.C = 64, .V = 256}, dc, d, "lm_head bf16", 1e-2);
  both_backends(make_block(48, 4, 192, 0.1f, 0.1f), dc, da, "transformer_block bf16", 2e-2);
}

}  // namespace

int main() {
  if (!gpu_test::device_or_skip("the nn modules' device twins were")) return 77;
  cudaStreamCreate(&st);
  test_gelu();
  test_layer_norm();
  test_embedding();
  test_cross_entropy();
  test_gemm_modules();
  cudaStreamDestroy(st);
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all nn device tests passed",
              failures.load());
  return failures ? 1 : 0;
}
