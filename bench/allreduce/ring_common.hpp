#pragma once
// Shared pieces of the all-reduce benchmark: sizes, iteration counts, percentiles, one row.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <sys/resource.h>

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
// CPU seconds (user + system) this process has used so far, all its threads together.
inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return s(u.ru_utime) + s(u.ru_stime);
}
// One JSON row: busbw = 2(p-1)/p * bytes / p50 time (the standard ring figure); cpu_ms = p50 of
// the CPU time this rank's process used per call (what the call costs a loaded machine).
inline void print_row(const char* transport, std::size_t bytes, int p, std::vector<double> secs,
                      std::vector<double> cpu) {
  double p50 = percentile(secs, 0.5), p99 = percentile(secs, 0.99);
  double algbw = static_cast<double>(bytes) / p50 / 1e9;
  double busbw = algbw * 2.0 * (p - 1) / p;
  std::printf(
      "{\"bytes\":%zu,\"transport\":\"%s\",\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,"
      "\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"cpu_ms\":%.4f}\n",
      bytes, transport, algbw, busbw, p50 * 1e3, p99 * 1e3, percentile(cpu, 0.5) * 1e3);
  std::fflush(stdout);
}

}  // namespace paco::bench
