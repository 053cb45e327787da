#pragma once
// What the GPU test binaries share: EXPECT (counts a failure, prints it, goes on), ok() for a
// paco::status, and the skip rule: without a usable CUDA device a binary prints why and exits 77
// (ctest's SKIP_RETURN_CODE), so CPU-only CI reports it skipped, compiled but not run.
#include <cuda_runtime.h>

#include <cstdio>

#include "paco/core/error.hpp"

namespace gpu_test {

inline int failures = 0;

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
