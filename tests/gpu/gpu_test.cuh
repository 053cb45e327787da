#pragma once
// What the GPU test binaries share: EXPECT (counts a failure, prints it, goes on), ok() for a
// paco::status, host ↔ device vectors, the error measures, and the skip rule: without a usable CUDA
// device a binary prints why and exits 77 (ctest's SKIP_RETURN_CODE), so CPU-only CI reports it
// skipped, compiled but not run.
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/core/rng.hpp"
#include "paco/cuda_buffer.cuh"
#include "paco/io/batches.hpp"

namespace gpu_test {

// n samples of N(0, scale²) from seed.
inline std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  paco::rng g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(g.normal()) * scale;
  return v;
}
template <class T>
paco::buffer<T, paco::cuda> dev(const std::vector<T>& h) {
  paco::buffer<T, paco::cuda> d(h.size());
  if (!h.empty()) cudaMemcpy(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  // From pageable memory cudaMemcpy may return before the data lands; the contexts' streams are
  // non-blocking (they do not wait for the default stream), so wait here.
  cudaDeviceSynchronize();
  return d;
}
// n elements from device pointer p, after every stream has finished.
template <class T>
std::vector<T> host(const T* p, std::size_t n) {
  cudaDeviceSynchronize();
  std::vector<T> h(n);
  if (n) cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}
template <class T>
std::vector<T> host(const paco::buffer<T, paco::cuda>& d) {
  return host(d.data(), d.size());
}
// The largest |a − b| / max(|b|, 1) over two vectors (∞ when their sizes differ).
inline double worst(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    w = std::fmax(w, std::fabs(double(a[i]) - b[i]) / std::fmax(std::fabs(double(b[i])), 1.0));
  return w;
}
// ‖a − b‖₂ / ‖b‖₂ over [begin, end) (0 when both are zero there; ∞ when sizes differ).
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b,
                     std::size_t begin = 0, std::size_t end = SIZE_MAX) {
  if (a.size() != b.size()) return INFINITY;
  end = end > b.size() ? b.size() : end;
  double e = 0, r = 0;
  for (std::size_t i = begin; i < end; ++i) {
    e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += double(b[i]) * b[i];
  }
  return r == 0 ? (e == 0 ? 0 : INFINITY) : std::sqrt(e / r);
}

inline std::atomic<int> failures = 0;  // EXPECT runs on worker threads too

inline bool ok(const paco::status& s, const char* what) {
  if (!s) std::printf("FAILED %s: %s\n", what, s.error().what().c_str());
  failures += !s;
  return static_cast<bool>(s);
}

// Ensures: true and the device printed when device 0 is usable; false with the reason printed.
inline bool device_or_skip(const char* what) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf(
        "SKIPPED: no usable CUDA device (%s: %s); %s compiled for sm_80 and sm_90 but "
        "not run\n",
        cudaGetErrorName(e), e == cudaSuccess ? "0 devices" : cudaGetErrorString(e), what);
    return false;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  return true;
}

// A corpus with structure to learn: sentences drawn from a small grammar, as bytes.
inline paco::io::token_stream grammar_stream(std::size_t bytes, std::uint64_t seed) {
  const char* subj[] = {"the cat ", "a dog ", "my friend ", "the old man ", "she "};
  const char* verb[] = {"sees ", "likes ", "walks with ", "finds ", "waits for "};
  const char* obj[] = {"the river. ", "a small bird. ", "her brother. ", "the red door. "};
  paco::rng g(seed);
  paco::io::token_stream s;
  s.doc_start.push_back(0);
  while (s.ids.size() < bytes) {
    for (const char* w : {subj[g.below(5)], verb[g.below(5)], obj[g.below(4)]})
      for (const char* c = w; *c; ++c)
        s.ids.push_back(std::int32_t(static_cast<unsigned char>(*c)));
  }
  return s;
}

}  // namespace gpu_test

#define EXPECT(cond, ...)                                           \
  do {                                                              \
    if (!(cond)) {                                                  \
      ++gpu_test::failures;                                         \
      std::printf("FAILED %s:%d: %s  ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                     \
      std::printf("\n");                                            \
    }                                                               \
  } while (0)
