// Differential tests: every kernel in kernels/paco/ against its host twin in include/paco/.
// Exits 77 (ctest SKIP_RETURN_CODE) with the reason when no CUDA device is usable.
// Legend: n elements; bytes compared exactly where the formulas are exact (quantize codes,
// casts, top-k), within a few ulps where FMA contraction may differ (Nesterov, AdamW).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "gpu_test.cuh"
#include "paco/compress/cast.hpp"
#include "paco/compress/error_feedback.hpp"
#include "paco/compress/quantize.hpp"
#include "paco/compress/topk.hpp"
#include "paco/kernels.cuh"
#include "paco/optim/adamw_update.hpp"
#include "paco/outer/nesterov_update.hpp"

namespace pc = paco::compress;
namespace popt = paco::optim;
namespace pout = paco::outer;
namespace pk = paco::kernels;

namespace {

using gpu_test::failures;
using gpu_test::ok;

std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  paco::rng g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(g.normal()) * scale;
  return v;
}
template <class T>
paco::buffer<T, paco::cuda> to_device(const std::vector<T>& h) {
  paco::buffer<T, paco::cuda> d(h.size());
  if (!h.empty()) cudaMemcpy(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <class T>
std::vector<T> to_host(const paco::buffer<T, paco::cuda>& d) {
  std::vector<T> h(d.size());
  if (!h.empty()) cudaMemcpy(h.data(), d.data(), h.size() * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}
// |a − b| in units of 2^-23·max(|a|, |b|, 1): the formulas use explicit FMAs, so host and device
// should agree exactly (0); a few units are tolerated for libm/sqrt differences.
float ulps(float a, float b) {
  const float m = std::fmax(std::fmax(std::fabs(a), std::fabs(b)), 1.0f);
  return std::fabs(a - b) / (m * 0x1.0p-23f);
}

void test_quantize(cudaStream_t st, pk::scratch_arena& scratch) {
  {  // widths the host codec has and the kernels do not pack: refused, nothing launched
    const pc::quantize_config cfg{.bits = 3, .block = 256};
    std::vector<std::byte> none(pc::quantize(cfg).wire_bytes(256, 3));
    const auto s = pk::quantize_blockwise(nullptr, 256, cfg, 3, 1, nullptr, none.size(), st);
    if (s || s.error().code != paco::errc::unsupported) {
      std::printf("FAILED quantize_blockwise accepted bits = 3\n");
      ++failures;
    }
  }
  // Blocks of 256 take the fast kernel with register-held groups, 1024 the one that reads a
  // block twice, 16 the fast kernel with partly idle warps; n = 1000 and 2^20 + 7 leave a
  // partial last block to the general kernel. `shift` moves x and the payload off their
  // alignment (shift 1: everything goes to the general kernels).
  for (auto mode : {pc::scale_mode::absmax, pc::scale_mode::minmax})
    for (bool stochastic : {false, true})
      for (int bits : {8, 4, 2})
        for (std::size_t block : {std::size_t{256}, std::size_t{1024}, std::size_t{16}})
          for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20,
                                (std::size_t{1} << 20) + 7})
            for (std::size_t shift : {std::size_t{0}, std::size_t{1}}) {
              if (shift && n != 1000) continue;
              const pc::quantize_config cfg{
                  .bits = bits, .block = block, .scale = mode, .stochastic = stochastic};
              pc::quantize host(cfg);
              auto x = gaussian(n, n + bits + block, 0.1f);
              std::vector<std::byte> hw(host.wire_bytes(n, bits));
              host.encode_with_key({x.data(), n}, bits, 77, {hw.data(), hw.size()});
              std::vector<float> xs(n + shift);
              std::copy(x.begin(), x.end(), xs.begin() + static_cast<std::ptrdiff_t>(shift));
              auto dxs = to_device(xs);
              const float* dx = dxs.data() + shift;
              paco::buffer<std::byte, paco::cuda> dws(hw.size() + shift);
              std::byte* dw = dws.data() + shift;
              ok(pk::quantize_blockwise(dx, n, cfg, bits, 77, dw, hw.size(), st),
                 "quantize_blockwise");
              cudaStreamSynchronize(st);
              std::vector<std::byte> dwh(hw.size());
              cudaMemcpy(dwh.data(), dw, hw.size(), cudaMemcpyDeviceToHost);
              EXPECT(std::memcmp(dwh.data(), hw.data(), hw.size()) == 0,
                     "quantize payload differs: mode %d stochastic %d bits %d block %zu n %zu "
                     "shift %zu",
                     int(mode), int(stochastic), bits, block, n, shift);
              std::vector<float> hy(n);
              ok(host.decode({hw.data(), hw.size()}, bits, {hy.data(), n}), "host decode");
              paco::buffer<float, paco::cuda> dys(n + shift);
              float* dy = dys.data() + shift;
              scratch.reset();
              unsigned* bad = nullptr;
              ok(pk::dequantize_blockwise(dw, hw.size(), n, cfg, bits, dy, scratch, st, &bad),
                 "dequantize_blockwise");
              unsigned bad_h = 1;
              cudaMemcpyAsync(&bad_h, bad, sizeof bad_h, cudaMemcpyDeviceToHost, st);
              cudaStreamSynchronize(st);
              std::vector<float> dyh(n);
              cudaMemcpy(dyh.data(), dy, n * 4, cudaMemcpyDeviceToHost);
              EXPECT(bad_h == 0, "bad blocks %u", bad_h);
              EXPECT(std::memcmp(dyh.data(), hy.data(), n * 4) == 0,
                     "dequantize differs: mode %d bits %d block %zu n %zu shift %zu", int(mode),
                     bits, block, n, shift);
            }
  {  // a corrupt scale in a full block and in the partial last block: zeros, counted
    const pc::quantize_config cfg{.bits = 8, .block = 256};
    pc::quantize host(cfg);
    const std::size_t n = 1000;
    auto x = gaussian(n, 5, 0.1f);
    std::vector<std::byte> hw(host.wire_bytes(n, 8));
    host.encode_with_key({x.data(), n}, 8, 0, {hw.data(), hw.size()});
    std::vector<float> hy(n);  // expected: the clean decode with blocks 1 and 3 zeroed
    ok(host.decode({hw.data(), hw.size()}, 8, {hy.data(), n}), "host decode");
    std::fill(hy.begin() + 256, hy.begin() + 512, 0.0f);
    std::fill(hy.begin() + 768, hy.end(), 0.0f);
    const float neg = -1.0f, inf = INFINITY;
    std::memcpy(hw.data() + 4 * 1, &neg, 4);  // block 1 (full)
    std::memcpy(hw.data() + 4 * 3, &inf, 4);  // block 3 (partial)
    auto dw = to_device(hw);
    paco::buffer<float, paco::cuda> dy(n);
    scratch.reset();
    unsigned* bad = nullptr;
    ok(pk::dequantize_blockwise(dw.data(), dw.size(), n, cfg, 8, dy.data(), scratch, st, &bad),
       "dequantize_blockwise");
    unsigned bad_h = 0;
    cudaMemcpyAsync(&bad_h, bad, sizeof bad_h, cudaMemcpyDeviceToHost, st);
    cudaStreamSynchronize(st);
    auto dyh = to_host(dy);
    EXPECT(bad_h == 2, "bad blocks %u, expected 2", bad_h);
    EXPECT(std::memcmp(dyh.data(), hy.data(), n * 4) == 0, "corrupt-scale decode differs");
  }
}

// Whole float4 groups take the vector loop; n = 1003 leaves 3 elements to the scalar tail, and
// shift 1 moves x, the codes and y off their alignment (everything scalar).
void test_cast(cudaStream_t st) {
  for (auto [n, shift] : {std::pair<std::size_t, std::size_t>{1 << 20, 0}, {1003, 0}, {1001, 1}})
    for (auto fmt : {pc::half_format::bf16, pc::half_format::fp16}) {
      paco::rng g(3 + n);
      std::vector<float> x(n);
      for (auto& v : x) v = pc::formula::float_of(static_cast<std::uint32_t>(g()));
      std::vector<float> xs(n + shift);
      std::copy(x.begin(), x.end(), xs.begin() + static_cast<std::ptrdiff_t>(shift));
      auto dxs = to_device(xs);
      pc::cast host({.format = fmt});
      std::vector<std::byte> hw(host.wire_bytes(n));
      (void)host.encode({x.data(), n}, 16, {hw.data(), hw.size()});
      paco::buffer<std::uint16_t, paco::cuda> dh(n + shift);
      ok(pk::cast_to_half(dxs.data() + shift, n, fmt, dh.data() + shift, st), "cast_to_half");
      paco::buffer<float, paco::cuda> dy(n + shift);
      ok(pk::cast_from_half(dh.data() + shift, n, fmt, dy.data() + shift, st), "cast_from_half");
      cudaStreamSynchronize(st);
      std::vector<std::uint16_t> hh(n);
      cudaMemcpy(hh.data(), dh.data() + shift, 2 * n, cudaMemcpyDeviceToHost);
      EXPECT(std::memcmp(hh.data(), hw.data(), hw.size()) == 0, "cast codes differ fmt %d n %zu",
             int(fmt), n);
      std::vector<float> hy(n);
      (void)host.decode({hw.data(), hw.size()}, 16, {hy.data(), n});
      std::vector<float> dyh(n);
      cudaMemcpy(dyh.data(), dy.data() + shift, 4 * n, cudaMemcpyDeviceToHost);
      EXPECT(std::memcmp(dyh.data(), hy.data(), n * 4) == 0, "cast decode differs fmt %d n %zu",
             int(fmt), n);
    }
}

void test_elementwise(cudaStream_t st) {
  const std::size_t n = (1 << 20) + 3;
  auto theta = gaussian(n, 1), b = gaussian(n, 2, 0.1f), d = gaussian(n, 3, 0.01f);
  auto dt = to_device(theta), db = to_device(b), dd = to_device(d);
  ok(pk::nesterov_update(dt.data(), db.data(), dd.data(), n, 0.9f, 0.7f, st), "nesterov");
  ok(pout::nesterov_update({theta.data(), n}, {b.data(), n}, {d.data(), n}, 0.9f, 0.7f), "host");
  cudaStreamSynchronize(st);
  auto th = to_host(dt), bh = to_host(db);
  float worst = 0;
  for (std::size_t i = 0; i < n; ++i)
    worst = std::fmax(worst, std::fmax(ulps(th[i], theta[i]), ulps(bh[i], b[i])));
  std::printf("nesterov max diff %.2f ulp\n", worst);
  EXPECT(worst <= 4, "nesterov differs by %.2f ulp", worst);

  auto m = gaussian(n, 4, 0.01f), v = gaussian(n, 5, 0.0f), gr = gaussian(n, 6, 0.1f);
  for (auto& e : v) e = 1e-4f;
  auto dm = to_device(m), dv = to_device(v), dg = to_device(gr);
  dt = to_device(theta);
  for (long t = 1; t <= 3; ++t) {
    const auto k = popt::formula::make_adamw_scalars(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    ok(pk::adamw_update(dt.data(), dm.data(), dv.data(), dg.data(), n, k, st), "adamw");
    ok(popt::adamw_update({theta.data(), n}, {m.data(), n}, {v.data(), n}, {gr.data(), n}, k),
       "host adamw");
  }
  cudaStreamSynchronize(st);
  th = to_host(dt);
  worst = 0;
  for (std::size_t i = 0; i < n; ++i) worst = std::fmax(worst, ulps(th[i], theta[i]));
  std::printf("adamw max diff %.2f ulp\n", worst);
  EXPECT(worst <= 16, "adamw differs by %.2f ulp", worst);

  auto g = gaussian(n, 7), r = gaussian(n, 8, 0.1f), sent = gaussian(n, 9);
  for (std::size_t i = 0; i < n; i += 3) r[i] = 0.0f;
  auto dgg = to_device(g), dr = to_device(r), ds = to_device(sent);
  ok(pk::ef_accumulate(dgg.data(), dr.data(), n, st), "ef_accumulate");
  ok(pk::ef_subtract(dr.data(), ds.data(), n, st), "ef_subtract");
  pc::ef_accumulate({g.data(), n}, {r.data(), n});
  pc::ef_subtract({r.data(), n}, {sent.data(), n});
  cudaStreamSynchronize(st);
  auto rh = to_host(dr);
  EXPECT(std::memcmp(rh.data(), r.data(), n * 4) == 0, "error feedback differs");
}

// kind 0: gaussian with a few equal maxima; 1: all zeros (every element ties at the cut);
// 2: values on a grid of 1/4 (large tie groups at the cut); 3: gaussian, x not 16-byte aligned;
// 4: large values exactly where the kernel samples, so its floor is too high and the selection
// falls back to collecting every element; 5: tiny values where it samples, so the cut lies far
// above the bins the collection counts and the selection finds its top bits over the entries.
void test_topk(cudaStream_t st, paco::buffer<std::byte, paco::cuda>& scratch_mem) {
  for (int kind : {0, 1, 2, 3, 4, 5})
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{3} << 20})
      for (double dens : {0.001, 0.01, 0.5}) {
        auto x = gaussian(n, n + kind);
        if (kind == 0 && n > 100) x[10] = x[11] = x[50] = 50.0f;  // ties among the largest
        if (kind == 1) std::fill(x.begin(), x.end(), 0.0f);
        if (kind == 2)
          for (auto& v : x) v = std::round(v * 4.0f) / 4.0f;
        if (kind == 4 || kind == 5)
          for (std::size_t i = 0; i < pk::detail::topk_sample_count(n); ++i)
            x[pk::detail::topk_sample_position(n, i)] *= kind == 4 ? 100.0f : 0x1p-20f;
        pc::topk host;
        std::vector<std::byte> hw(host.wire_bytes(n, dens));
        (void)host.encode({x.data(), n}, dens, {hw.data(), hw.size()});
        const std::size_t shift = kind == 3 ? 1 : 0;
        std::vector<float> xs(n + shift);
        std::copy(x.begin(), x.end(), xs.begin() + static_cast<std::ptrdiff_t>(shift));
        auto dxs = to_device(xs);
        paco::buffer<std::byte, paco::cuda> dw(hw.size());
        const std::size_t need = pk::topk_workspace_bytes(n, pc::topk_count(n, dens)) + 256;
        if (scratch_mem.size() < need) scratch_mem.resize(need);
        pk::scratch_arena scratch(scratch_mem.data(), scratch_mem.size());
        ok(pk::topk_select(dxs.data() + shift, n, dens, dw.data(), dw.size(), scratch, st),
           "topk_select");
        cudaStreamSynchronize(st);
        auto dwh = to_host(dw);
        EXPECT(std::memcmp(dwh.data(), hw.data(), hw.size()) == 0,
               "topk differs kind %d n %zu density %g", kind, n, dens);
        std::vector<float> hy(n);
        (void)host.decode({hw.data(), hw.size()}, dens, {hy.data(), n});
        paco::buffer<float, paco::cuda> dy(n);
        scratch.reset();
        ok(pk::topk_decode(dw.data(), dw.size(), n, dens, dy.data(), scratch, st), "topk_decode");
        cudaStreamSynchronize(st);
        auto dyh = to_host(dy);
        EXPECT(std::memcmp(dyh.data(), hy.data(), n * 4) == 0, "topk decode differs kind %d n %zu",
               kind, n);
      }
  {  // a scratch arena too small is refused before anything is launched
    std::vector<float> x(1000, 1.0f);
    auto dx = to_device(x);
    paco::buffer<std::byte, paco::cuda> dw(8 * pc::topk_count(1000, 0.01));
    paco::buffer<std::byte, paco::cuda> tiny(256);
    pk::scratch_arena scratch(tiny.data(), tiny.size());
    const auto s = pk::topk_select(dx.data(), 1000, 0.01, dw.data(), dw.size(), scratch, st);
    EXPECT(!s && s.error().code == paco::errc::too_large, "topk_select took a too-small scratch");
  }
}

// One worker's outer step on the device, as a DiLoCo worker with int8 + error feedback runs it:
// r ← Δ + r; payload = quantize(r); sent = dequantize(payload); r ← r − sent; then the outer
// Nesterov step on the decoded average (here: one worker's sent). Three rounds against the host
// (error_feedback<quantize>, whose encode is fused per block, and outer::nesterov_update):
// the payloads, the residual and θ must agree bit for bit.
void test_outer_step(cudaStream_t st, pk::scratch_arena& scratch) {
  const std::size_t n = (std::size_t{1} << 20) + 100;  // a partial last scale block
  const pc::quantize_config cfg{.bits = 8, .block = 256};
  pc::error_feedback<pc::quantize> host(pc::quantize{cfg});
  std::vector<float> theta = gaussian(n, 21), b(n, 0.0f), r(n, 0.0f), sent(n);
  paco::buffer<float, paco::cuda> d_theta = to_device(theta), d_b(n), d_r(n), d_delta(n), d_sent(n);
  std::vector<std::byte> hw(host.wire_bytes(n, 8)), dw(hw.size());
  paco::buffer<std::byte, paco::cuda> d_w(hw.size());
  for (int round = 0; round < 3; ++round) {
    auto delta = gaussian(n, 100 + round, 1e-3f);
    // host
    ok(host.encode({delta.data(), n}, {r.data(), n}, 8, {hw.data(), hw.size()}), "host ef encode");
    ok(host.decode({hw.data(), hw.size()}, 8, {sent.data(), n}), "host decode");
    ok(pout::nesterov_update({theta.data(), n}, {b.data(), n}, {sent.data(), n}, 0.9f, 0.7f),
       "host nesterov");
    // device
    cudaMemcpy(d_delta.data(), delta.data(), 4 * n, cudaMemcpyHostToDevice);
    ok(pk::ef_accumulate(d_delta.data(), d_r.data(), n, st), "ef_accumulate");
    ok(pk::quantize_blockwise(d_r.data(), n, cfg, 8, 0, d_w.data(), d_w.size(), st), "quantize");
    scratch.reset();
    ok(pk::dequantize_blockwise(d_w.data(), d_w.size(), n, cfg, 8, d_sent.data(), scratch, st),
       "dequantize");
    ok(pk::ef_subtract(d_r.data(), d_sent.data(), n, st), "ef_subtract");
    ok(pk::nesterov_update(d_theta.data(), d_b.data(), d_sent.data(), n, 0.9f, 0.7f, st),
       "nesterov_update");
    cudaStreamSynchronize(st);
    cudaMemcpy(dw.data(), d_w.data(), dw.size(), cudaMemcpyDeviceToHost);
    EXPECT(std::memcmp(dw.data(), hw.data(), hw.size()) == 0,
           "outer step payload differs, round %d", round);
  }
  EXPECT(std::memcmp(to_host(d_r).data(), r.data(), 4 * n) == 0, "outer step residual differs");
  EXPECT(std::memcmp(to_host(d_theta).data(), theta.data(), 4 * n) == 0, "outer step θ differs");
}

}  // namespace

int main() {
  if (!gpu_test::device_or_skip("the kernels were")) return 77;
  cudaStream_t st;
  cudaStreamCreate(&st);
  paco::buffer<std::byte, paco::cuda> scratch_mem(pk::dequantize_workspace_bytes());
  pk::scratch_arena scratch(scratch_mem.data(), scratch_mem.size());
  test_quantize(st, scratch);
  test_cast(st);
  test_elementwise(st);
  paco::buffer<std::byte, paco::cuda> topk_mem;
  test_topk(st, topk_mem);
  scratch.reset();
  test_outer_step(st, scratch);
  cudaStreamDestroy(st);
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all kernel tests passed",
              failures.load());
  return failures ? 1 : 0;
}
