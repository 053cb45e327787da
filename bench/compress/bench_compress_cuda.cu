// bench_compress_cuda: CUDA kernel throughput (quantize/dequantize int8 and int4 absmax, int8
// min-max and stochastic, bf16 cast, top-k at densities 0.001, 0.01, 0.1) on a 64 MiB float32
// buffer against cudaMemcpy device-to-device of the same buffer, timed with CUDA events (median
// of reps). Validates against the host codec before timing. Throughput is fp32 bytes per second
// (4n / time). Last line: {"bench":"compress","rows":[...]}.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "paco/compress/cast.hpp"
#include "paco/compress/quantize.hpp"
#include "paco/compress/topk.hpp"
#include "paco/kernels.cuh"

namespace pc = paco::compress;
namespace pk = paco::kernels;

namespace {
float time_ms(cudaStream_t st, const std::function<void()>& f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, st);
  f();
  cudaEventRecord(b, st);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}
float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "bench_compress_cuda: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const std::size_t n = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64ull << 20) / 4;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  std::vector<float> hx(n);
  paco::rng g(42);
  for (auto& v : hx) v = static_cast<float>(g.normal()) * 1e-3f;
  paco::buffer<float, paco::cuda> x(n), y(n), z(n);
  cudaMemcpy(x.data(), hx.data(), 4 * n, cudaMemcpyHostToDevice);
  cudaStream_t st;
  cudaStreamCreate(&st);
  const double gb = 4.0 * n / 1e9;
  std::vector<float> copies;
  auto copy = [&] {
    return time_ms(
        st, [&] { cudaMemcpyAsync(z.data(), x.data(), 4 * n, cudaMemcpyDeviceToDevice, st); });
  };
  for (int i = 0; i < 3; ++i) copy();
  std::string rows;
  auto add = [&](const std::string& name, const std::function<void()>& enc,
                 const std::function<void()>& dec) {
    enc();
    dec();
    cudaStreamSynchronize(st);
    std::vector<float> te, td;
    for (int r = 0; r < reps; ++r) {
      copies.push_back(copy());
      te.push_back(time_ms(st, enc));
      td.push_back(time_ms(st, dec));
    }
    const double e = gb / (median(te) * 1e-3), d = gb / (median(td) * 1e-3);
    std::fprintf(stderr, "%-12s encode %8.1f GB/s  decode %8.1f GB/s\n", name.c_str(), e, d);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s{\"codec\":\"%s\",\"backend\":\"cuda\",\"encode_GBps\":%.1f,"
                  "\"decode_GBps\":%.1f,\"frac_of_copy\":@%s@}",
                  rows.empty() ? "" : ",", name.c_str(), e, d,
                  std::to_string(std::min(e, d)).c_str());
    rows += buf;
  };
  paco::buffer<std::byte, paco::cuda> scratch_mem(std::max(
      pk::dequantize_workspace_bytes(), pk::topk_workspace_bytes(n, pc::topk_count(n, 0.01))));
  pk::scratch_arena scratch(scratch_mem.data(), scratch_mem.size());
  int bad = 0;
  struct variant {
    const char* name;
    pc::quantize_config cfg;
  };
  const variant variants[] = {
      {"int8", {.bits = 8, .block = 256}},
      {"int4", {.bits = 4, .block = 256}},
      {"int8_minmax", {.bits = 8, .block = 256, .scale = pc::scale_mode::minmax}},
      {"int8_stochastic", {.bits = 8, .block = 256, .stochastic = true}},
  };
  for (const auto& [name, cfg] : variants) {
    const int bits = cfg.bits;
    pc::quantize host(cfg);
    paco::buffer<std::byte, paco::cuda> w(host.wire_bytes(n, bits));
    // validate: device payload == host payload (same key for the stochastic rounding)
    std::vector<std::byte> hw(w.size()), dw(w.size());
    host.encode_with_key({hx.data(), n}, bits, 7, {hw.data(), hw.size()});
    (void)pk::quantize_blockwise(x.data(), n, cfg, bits, 7, w.data(), w.size(), st);
    cudaMemcpy(dw.data(), w.data(), w.size(), cudaMemcpyDeviceToHost);
    if (std::memcmp(hw.data(), dw.data(), hw.size()) != 0) {
      std::fprintf(stderr, "%s: device payload differs from host\n", name);
      bad = 1;
    }
    add(
        name,
        [&] { (void)pk::quantize_blockwise(x.data(), n, cfg, bits, 7, w.data(), w.size(), st); },
        [&] {
          scratch.reset();
          (void)pk::dequantize_blockwise(w.data(), w.size(), n, cfg, bits, y.data(), scratch, st);
        });
  }
  paco::buffer<std::uint16_t, paco::cuda> h(n);
  add(
      "bf16", [&] { (void)pk::cast_to_half(x.data(), n, pc::half_format::bf16, h.data(), st); },
      [&] { (void)pk::cast_from_half(h.data(), n, pc::half_format::bf16, y.data(), st); });
  for (double density : {0.001, 0.01, 0.1}) {
    const std::size_t k = pc::topk_count(n, density);
    paco::buffer<std::byte, paco::cuda> tw(8 * k);
    char name[32];
    std::snprintf(name, sizeof name, "topk_%g", density);
    add(
        name,
        [&] {
          scratch.reset();
          (void)pk::topk_select(x.data(), n, density, tw.data(), tw.size(), scratch, st);
        },
        [&] {
          scratch.reset();
          (void)pk::topk_decode(tw.data(), tw.size(), n, density, y.data(), scratch, st);
        });
  }
  const double cp = gb / (median(copies) * 1e-3);
  std::fprintf(stderr, "%-12s %8.1f GB/s (device to device, %s)\n", "copy", cp, prop.name);
  // frac_of_copy placeholders @x@ -> x / copy
  std::string out;
  for (std::size_t i = 0; i < rows.size();) {
    const auto a = rows.find('@', i);
    if (a == std::string::npos) {
      out += rows.substr(i);
      break;
    }
    const auto b = rows.find('@', a + 1);
    out += rows.substr(i, a - i);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", std::atof(rows.substr(a + 1, b - a - 1).c_str()) / cp);
    out += buf;
    i = b + 1;
  }
  std::printf("{\"bench\":\"compress\",\"rows\":[%s],\"copy_GBps\":%.1f,\"device\":\"%s\"}\n",
              out.c_str(), cp, prop.name);
  cudaStreamDestroy(st);
  return bad;
}
