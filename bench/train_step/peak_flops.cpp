// Peak FP32 rate of this CPU: independent AVX-512 (or AVX2) FMA chains, on 1..T threads.
// Prints "threads gflops" lines; the peer for paco_peak_frac and gemm_peak_frac.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#if defined(__AVX512F__)
constexpr double flops_per_iter = 12 * 16 * 2;
#else
constexpr double flops_per_iter = 12 * 8 * 2;
#endif

static void run(long iters) {
#if defined(__AVX512F__)
  __m512 a[12], b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(float(i));
  for (long k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  volatile float sink = s[0] + s[15];  // (g++ 12 warns inside _mm512_reduce_add_ps)
  (void)sink;
#else
  __m256 a[12], b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(float(i));
  for (long k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  volatile float sink = a[0][0] + a[11][0];
  (void)sink;
#endif
}

int main(int argc, char** argv) {
  int max_threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const long iters = 100'000'000;
  for (int t = 1; t <= max_threads; ++t) {
    std::vector<double> rates;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> th;
      for (int i = 0; i < t; ++i) th.emplace_back([&] { run(iters); });
      for (auto& x : th) x.join();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rates.push_back(double(iters) * flops_per_iter * t / s / 1e9);
    }
    std::sort(rates.begin(), rates.end());
    std::printf("%d %.1f\n", t, rates.back());
  }
}
