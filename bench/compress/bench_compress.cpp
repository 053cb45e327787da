// bench_compress: host encode/decode throughput of every compressor on a 64 MiB float32 buffer,
// against memcpy of the same buffer measured in the same run (median of reps, one thread).
// Throughput is fp32 bytes per second (4n / time) for encode, decode and copy alike.
// Validates before timing: decode(encode(x)) must meet each codec's error bound.
// Last line: {"bench":"compress","rows":[...]}.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "paco/compress/compress.hpp"
#include "paco/core/buffer.hpp"
#include "paco/core/rng.hpp"

namespace pc = paco::compress;

namespace {

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct row {
  std::string codec;
  double enc = 0, dec = 0, frac = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64ull << 20) / 4;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  paco::buffer<float> x(n), y(n), z(n);
  paco::rng g(42);
  for (auto& v : x) v = static_cast<float>(g.normal()) * 1e-3f;
  const double gb = 4.0 * static_cast<double>(n) / 1e9;
  std::vector<row> rows;
  std::vector<double> copies;

  auto copy_once = [&] { return seconds_of([&] { std::memcpy(z.data(), x.data(), 4 * n); }); };

  auto run = [&](const std::string& name, auto& codec, auto level, double tol_rel) {
    paco::buffer<std::byte> wire(codec.wire_bytes(n, level));
    // validate before timing
    auto s = codec.encode(x.view(), level, wire.view());
    if (s) s = codec.decode(wire.view(), level, y.view());
    if (!s) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), s.error().what().c_str());
      std::exit(1);
    }
    double num = 0, den = 0;
    for (std::size_t i = 0; i < n; ++i) {
      num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      den += double(x[i]) * x[i];
    }
    const double rel = std::sqrt(num / den);
    if (rel > tol_rel) {
      std::fprintf(stderr, "%s: relative error %.3g above %.3g\n", name.c_str(), rel, tol_rel);
      std::exit(1);
    }
    std::vector<double> te, td;
    for (int r = 0; r < reps; ++r) {  // interleave with memcpy so all see the same machine state
      copies.push_back(copy_once());
      te.push_back(seconds_of([&] { (void)codec.encode(x.view(), level, wire.view()); }));
      td.push_back(seconds_of([&] { (void)codec.decode(wire.view(), level, y.view()); }));
    }
    row r{name, gb / median(te), gb / median(td)};
    std::fprintf(stderr,
                 "%-22s encode %6.2f GB/s  decode %6.2f GB/s  rel.err %.2e  wire %.3f of fp32\n",
                 name.c_str(), r.enc, r.dec, rel, double(wire.size()) / (4.0 * n));
    rows.push_back(r);
  };

  for (int r = 0; r < 3; ++r) copies.push_back(copy_once());  // warm the pages
  copies.clear();

  pc::identity id;
  run("identity", id, 32, 0.0);
  pc::cast bf({.format = pc::half_format::bf16});
  run("bf16", bf, 16, 5e-3);
  pc::cast fp({.format = pc::half_format::fp16});
  run("fp16", fp, 16, 1e-3);
  pc::quantize q8({.bits = 8, .block = 256});
  run("int8", q8, 8, 2e-2);
  pc::error_feedback<pc::quantize> ef8(pc::quantize({.bits = 8, .block = 256}));
  paco::buffer<float> residual(n);
  auto ef8_bound = ef8.bind(residual.view());
  run("int8+ef", ef8_bound, 8, 2e-2);
  pc::quantize q8m({.bits = 8, .block = 256, .scale = pc::scale_mode::minmax});
  run("int8_minmax", q8m, 8, 2e-2);
  pc::quantize q4({.bits = 4, .block = 256});
  run("int4", q4, 4, 0.3);
  pc::quantize q4m({.bits = 4, .block = 256, .scale = pc::scale_mode::minmax});
  run("int4_minmax", q4m, 4, 0.3);
  pc::quantize q6({.bits = 6, .block = 256});  // the widths L-GreCo adds (pext / pdep paths)
  run("int6", q6, 6, 0.1);
  pc::quantize q3({.bits = 3, .block = 256});
  run("int3", q3, 3, 0.6);
  pc::quantize q8s({.bits = 8, .block = 256, .stochastic = true});
  run("int8_stochastic", q8s, 8, 3e-2);
  pc::topk tk;
  run("topk_0.01", tk, 0.01, 1.0);
  pc::sign_prune sp;
  run("sign_prune_0.5", sp, 0.5, 1.0);

  const double copy = gb / median(copies);
  std::fprintf(stderr, "%-22s %6.2f GB/s (median of %zu, interleaved)\n", "memcpy", copy,
               copies.size());
  char head[160];
  std::snprintf(head, sizeof head,
                "{\"bench\":\"compress\",\"copy_GBps\":%.2f,\"bytes\":%zu,\"rows\":[", copy, 4 * n);
  std::string json = head;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto& r = rows[i];
    r.frac = std::min(r.enc, r.dec) / copy;
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s{\"codec\":\"%s\",\"backend\":\"host\",\"encode_GBps\":%.2f,"
                  "\"decode_GBps\":%.2f,\"frac_of_copy\":%.3f}",
                  i ? "," : "", r.codec.c_str(), r.enc, r.dec, r.frac);
    json += buf;
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
}
