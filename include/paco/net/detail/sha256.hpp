#pragma once
// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), self-contained so that the token handshake
// needs no crypto library. Used only for authentication of a handshake, never for bulk data.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace paco::net::detail {

using digest256 = std::array<std::uint8_t, 32>;

class sha256 {
 public:
  sha256() { reset(); }
  void reset() noexcept {
    static constexpr std::uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                              0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::memcpy(h_, init, sizeof h_);
    len_ = 0;
    fill_ = 0;
  }
  void update(const void* data, std::size_t n) noexcept {
    auto p = static_cast<const std::uint8_t*>(data);
    len_ += n;
    while (n) {
      std::size_t k = std::min<std::size_t>(64 - fill_, n);
      std::memcpy(buf_ + fill_, p, k);
      fill_ += k;
      p += k;
      n -= k;
      if (fill_ == 64) {
        block(buf_);
        fill_ = 0;
      }
    }
  }
  void update(std::string_view s) noexcept { update(s.data(), s.size()); }
  digest256 finish() noexcept {
    std::uint64_t bits = len_ * 8;
    std::uint8_t pad = 0x80;
    update(&pad, 1);
    std::uint8_t zero = 0;
    while (fill_ != 56) update(&zero, 1);
    std::uint8_t l[8];
    for (int i = 0; i < 8; ++i) l[i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
    update(l, 8);
    digest256 d;
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j) d[4 * i + j] = static_cast<std::uint8_t>(h_[i] >> (24 - 8 * j));
    return d;
  }

 private:
  static std::uint32_t rotr(std::uint32_t x, int n) noexcept { return (x >> n) | (x << (32 - n)); }
  void block(const std::uint8_t* p) noexcept {
    static constexpr std::uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (std::uint32_t(p[4 * i]) << 24) | (std::uint32_t(p[4 * i + 1]) << 16) |
             (std::uint32_t(p[4 * i + 2]) << 8) | std::uint32_t(p[4 * i + 3]);
    for (int i = 16; i < 64; ++i) {
      std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6],
                  h = h_[7];
    for (int i = 0; i < 64; ++i) {
      std::uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      std::uint32_t ch = (e & f) ^ (~e & g);
      std::uint32_t t1 = h + s1 + ch + k[i] + w[i];
      std::uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      std::uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
      std::uint32_t t2 = s0 + mj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }
  std::uint32_t h_[8];
  std::uint64_t len_;
  std::uint8_t buf_[64];
  std::size_t fill_;
};

// HMAC-SHA256 over the concatenation of `parts`. Ensures: RFC 4231 test vectors hold.
inline digest256 hmac_sha256(std::string_view key,
                             std::initializer_list<std::span<const std::byte>> parts) noexcept {
  std::uint8_t k[64] = {};
  if (key.size() > 64) {
    sha256 h;
    h.update(key);
    auto d = h.finish();
    std::memcpy(k, d.data(), 32);
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  std::uint8_t ipad[64], opad[64];
  for (int i = 0; i < 64; ++i) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  sha256 in;
  in.update(ipad, 64);
  for (auto p : parts) in.update(p.data(), p.size());
  auto inner = in.finish();
  sha256 out;
  out.update(opad, 64);
  out.update(inner.data(), 32);
  return out.finish();
}

// Equality of two digests in time independent of where they differ.
inline bool digest_equal(const std::uint8_t* a, const std::uint8_t* b) noexcept {
  std::uint8_t d = 0;
  for (int i = 0; i < 32; ++i) d |= a[i] ^ b[i];
  return d == 0;
}

}  // namespace paco::net::detail
