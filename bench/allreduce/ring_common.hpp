#pragma once
// Shared pieces of the all-reduce benchmark: sizes, iteration counts, percentiles, one row.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace paco::bench {

// float32 all-reduce sizes: 4 KiB .. 64 MiB in steps of 4x (and max_bytes as the last).
inline std::vector<std::size_t> sizes(std::size_t max_bytes) {
  std::vector<std::size_t> s;
  std::size_t lo = 4096;
  if (const char* e = std::getenv("PACO_BENCH_MIN_BYTES")) lo = std::strtoull(e, nullptr, 10);
  for (std::size_t b = lo; b <= max_bytes; b *= 4) s.push_back(b);
  return s;
}
inline int iterations(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t(512) << 20) / bytes, 8, 200));
}
inline double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  std::size_t i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}
// One JSON row: busbw = 2(p-1)/p * bytes / p50 time (the standard ring figure).
inline void print_row(const char* transport, std::size_t bytes, int p, std::vector<double> secs) {
  double p50 = percentile(secs, 0.5), p99 = percentile(secs, 0.99);
  double algbw = static_cast<double>(bytes) / p50 / 1e9;
  double busbw = algbw * 2.0 * (p - 1) / p;
  std::printf(
      "{\"bytes\":%zu,\"transport\":\"%s\",\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,"
      "\"p50_ms\":%.4f,\"p99_ms\":%.4f}\n",
      bytes, transport, algbw, busbw, p50 * 1e3, p99 * 1e3);
  std::fflush(stdout);
}

}  // namespace paco::bench
