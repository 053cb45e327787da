// The device side of a path worker's memory: arena<cuda> against arena<host> (same layout, same
// module offsets), the counted copies between them, and cuda_context (stream, cuBLAS, scratch)
// with one cuBLAS GEMM against the host GEMM. Exits 77 without a usable CUDA device.
#include <cmath>
#include <cstdio>
#include <vector>

#include "gpu_test.cuh"
#include "paco/arena_cuda.cuh"
#include "paco/context_cuda.cuh"
#include "paco/core/rng.hpp"

namespace pk = paco::kernels;
using gpu_test::failures;
using gpu_test::ok;
using paco::plane;

namespace {

paco::param_layout two_modules() {
  paco::param_layout l;
  l.add("embed", 1000);
  l.add("head", 333);
  return l;
}

void test_arena(pk::cuda_context& ctx) {
  paco::arena<paco::host> h(two_modules()), back(two_modules());
  paco::arena<paco::cuda> d(two_modules());
  EXPECT(!d.has(plane::param) && d.device_bytes() == 0, "planes are allocated on first use");
  paco::rng g(7);
  for (auto& x : h.get(plane::param)) x = float(g.normal());
  paco::transfer_log log;
  ok(upload(h, d, plane::param, ctx.stream(), &log), "upload");
  const std::size_t total = h.layout().total(), off1 = h.layout().entry(1).offset;  // padded
  EXPECT(d.has(plane::param) && d.get(plane::param).size() == total, "device plane size");
  EXPECT(std::size_t(d.get(plane::param, 1).data() - d.get(plane::param).data()) == off1,
         "module 1 sits at the host layout's offset");
  ok(download(d, back, plane::param, ctx.stream(), &log), "download");
  ok(ctx.synchronize(), "synchronize");
  const auto a = h.get(plane::param), b = back.get(plane::param);
  EXPECT(std::equal(a.begin(), a.end(), b.begin()), "the round trip changed θ");
  EXPECT(log.h2d_bytes == 4 * total && log.d2h_bytes == 4 * total && log.h2d_copies == 1 &&
             log.d2h_copies == 1,
         "transfer log: h2d %llu d2h %llu", (unsigned long long)log.h2d_bytes,
         (unsigned long long)log.d2h_bytes);
  // One module's span down, nothing else.
  std::vector<float> head(333);
  ok(download(d.get(plane::param, 1), paco::slice<float>(head.data(), head.size()), ctx.stream(),
              &log),
     "download one module");
  ok(ctx.synchronize(), "synchronize");
  EXPECT(std::equal(head.begin(), head.end(), a.begin() + std::ptrdiff_t(off1)),
         "module 1's span differs");
  EXPECT(log.d2h_bytes == 4 * (total + 333) && log.d2h_copies == 2, "module download counted");
  ok(d.zero(plane::param, ctx.stream()), "zero");
  ok(download(d, back, plane::param, ctx.stream(), nullptr), "download zeros");
  ok(ctx.synchronize(), "synchronize");
  for (float x : back.get(plane::param)) EXPECT(x == 0.0f, "zero() left %g", x);
  // An arena of another layout is refused, naming both layouts.
  paco::arena<paco::host> other([] {
    paco::param_layout l;
    l.add("w", 10);
    return l;
  }());
  other.get(plane::param);
  const auto s = upload(other, d, plane::param, ctx.stream());
  EXPECT(!s && s.error().code == paco::errc::mismatch &&
             s.error().message.find("1 modules, 16 floats") != std::string::npos,
         "a layout mismatch must be refused");
}

// C (M×N) = A (M×K) · B (K×N), row-major, through cuBLAS in fp32 (column-major: Cᵀ = Bᵀ Aᵀ)
// against a double-precision host loop: relative error ≤ 1e-4. (The nn GEMM pulls in Eigen,
// which nvcc does not compile cleanly; the host modules' tests cover it.)
void test_cublas(pk::cuda_context& ctx) {
  const int M = 96, N = 80, K = 256;
  paco::rng g(11);
  std::vector<float> A(std::size_t(M) * K), B(std::size_t(K) * N), C(std::size_t(M) * N, 0.0f);
  for (auto& x : A) x = float(g.normal());
  for (auto& x : B) x = float(g.normal());
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(A[std::size_t(i) * K + k]) * B[std::size_t(k) * N + j];
      C[std::size_t(i) * N + j] = float(s);
    }
  paco::buffer<float, paco::cuda> dA(A.size()), dB(B.size()), dC(C.size());
  ok(upload(paco::slice<const float>(A.data(), A.size()), dA.view(), ctx.stream()), "A");
  ok(upload(paco::slice<const float>(B.data(), B.size()), dB.view(), ctx.stream()), "B");
  const float one = 1.0f, zero = 0.0f;
  ok(pk::cublas_status(cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, dB.data(),
                                   N, dA.data(), K, &zero, dC.data(), N),
                       "cublasSgemm"),
     "cublasSgemm");
  std::vector<float> got(C.size());
  ok(download(dC.view(), paco::slice<float>(got.data(), got.size()), ctx.stream()), "C");
  ok(ctx.synchronize(), "synchronize");
  double worst = 0;
  for (std::size_t i = 0; i < C.size(); ++i)
    worst = std::fmax(worst, std::fabs(got[i] - C[i]) / std::fmax(std::fabs(C[i]), 1.0f));
  EXPECT(worst <= 1e-4, "cuBLAS against host GEMM: worst relative error %g", worst);
  // The scratch workspace hands out aligned pieces and resets.
  auto& s = ctx.scratch();
  s.reset();
  void* p = s.take(1000);
  void* q = s.take(1000);
  EXPECT(p && q && (static_cast<char*>(q) - static_cast<char*>(p)) % 256 == 0,
         "scratch pieces are 256-byte aligned");
  s.reset();
  EXPECT(s.used() == 0, "scratch reset");
}

}  // namespace

int main() {
  if (!gpu_test::device_or_skip("arena<cuda> and cuda_context were")) return 77;
  auto ctx = pk::cuda_context::make(0, 1 << 20);
  if (!ctx) {
    std::printf("FAILED cuda_context::make: %s\n", ctx.error().what().c_str());
    return 1;
  }
  test_arena(*ctx);
  test_cublas(*ctx);
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all device tests passed",
              failures.load());
  return failures ? 1 : 0;
}
