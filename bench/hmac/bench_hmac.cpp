// bench_hmac: paco's HMAC-SHA-256 (net/detail/sha256.hpp) against OpenSSL's HMAC(EVP_sha256()),
// the peer a reader would reach for. First both compute the same digest on random keys and
// messages (a second implementation: the check is not ours alone); then each is timed on the
// handshake's message (label + client and server greetings, what net/wire.hpp's server_mac and
// client_mac sign) and on 1 MiB. Prints a line per size and LAST one JSON object.
//   bench_hmac [REPS]
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "paco/net/detail/sha256.hpp"
#include "paco/net/wire.hpp"

using namespace paco;

namespace {

net::detail::digest256 ours(const std::string& key, const std::vector<std::byte>& msg) {
  return net::detail::hmac_sha256(key, {std::span<const std::byte>(msg)});
}

net::detail::digest256 openssl(const std::string& key, const std::vector<std::byte>& msg) {
  net::detail::digest256 d{};
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), int(key.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
       reinterpret_cast<unsigned char*>(d.data()), &len);
  if (len != 32) std::abort();
  return d;
}

// Median seconds per call of f over reps rounds of n calls each.
template <class F>
double median_s(F&& f, int reps, int n) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  std::mt19937_64 rng(7);
  const auto random_bytes = [&](std::size_t n) {
    std::vector<std::byte> v(n);
    for (auto& b : v) b = std::byte(rng() & 0xff);
    return v;
  };
  // The same digests: keys shorter and longer than SHA-256's 64-byte block, messages of every
  // length around the block boundaries.
  for (std::size_t klen : {0u, 1u, 16u, 63u, 64u, 65u, 200u})
    for (std::size_t mlen = 0; mlen < 300; mlen += 7) {
      const auto kb = random_bytes(klen);
      const std::string key(reinterpret_cast<const char*>(kb.data()), kb.size());
      const auto msg = random_bytes(mlen);
      if (ours(key, msg) != openssl(key, msg)) {
        std::fprintf(stderr, "bench_hmac: digests differ (key %zu bytes, message %zu bytes)\n",
                     klen, mlen);
        return 1;
      }
    }
  const std::string key = "a-64-character-token-as-the-launcher-draws-0123456789abcdef0123";
  const std::size_t handshake = 6 + 2 * sizeof(net::wire::hello_body);
  std::string rows;
  for (std::size_t bytes : {handshake, std::size_t(1) << 20}) {
    const auto msg = random_bytes(bytes);
    const int n = bytes < 4096 ? 20000 : 20;
    volatile std::uint8_t sink = 0;
    const double a = median_s([&] { sink = sink ^ std::uint8_t(ours(key, msg)[0]); }, reps, n);
    const double b = median_s([&] { sink = sink ^ std::uint8_t(openssl(key, msg)[0]); }, reps, n);
    std::printf("%8zu bytes: paco %.3f us, OpenSSL %.3f us, paco / OpenSSL %.2f\n", bytes, a * 1e6,
                b * 1e6, a / b);
    char row[256];
    std::snprintf(row, sizeof row,
                  "%s{\"message_bytes\":%zu,\"paco_us\":%.4f,\"openssl_us\":%.4f,"
                  "\"paco_over_openssl\":%.3f}",
                  rows.empty() ? "" : ",", bytes, a * 1e6, b * 1e6, a / b);
    rows += row;
  }
  std::printf("{\"bench\":\"hmac\",\"rows\":[%s],\"reps\":%d,\"same_digests\":true}\n",
              rows.c_str(), reps);
  return 0;
}
