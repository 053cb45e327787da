#pragma once
// rng: a small, seeded, splittable generator (SplitMix64 seeding + xoshiro256**), identical on
// every platform, so the same seed gives the same model and the same batches everywhere.

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

namespace paco {

class rng {
 public:
  using result_type = std::uint64_t;

  explicit rng(std::uint64_t seed = 0x5eed) { reseed(seed); }

  void reseed(std::uint64_t seed) {
    for (auto& w : s_) w = splitmix(seed);
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }

  result_type operator()() noexcept {
    const std::uint64_t r = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }

  // Uniform in [0, 1).
  double uniform() noexcept { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n). Requires: n > 0.
  std::uint64_t below(std::uint64_t n) noexcept {
    return static_cast<std::uint64_t>(uniform() * static_cast<double>(n));
  }
  // Standard normal (Box-Muller, one value per call).
  double normal() noexcept {
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // The generator's whole state: a generator given it (set_state) draws the same numbers from
  // then on (a checkpoint's resume point).
  using state_type = std::array<std::uint64_t, 4>;
  state_type state() const noexcept { return {s_[0], s_[1], s_[2], s_[3]}; }
  void set_state(const state_type& s) noexcept {
    for (int i = 0; i < 4; ++i) s_[i] = s[std::size_t(i)];
  }
  // A state as 64 hex digits (a checkpoint's metadata), and back. from_hex: nullopt unless
  // exactly 64 lower-case hex digits.
  static std::string to_hex(const state_type& s) {
    std::string out;
    char b[17];
    for (auto w : s) {
      std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(w));
      out += b;
    }
    return out;
  }
  static std::optional<state_type> from_hex(const std::string& h) {
    if (h.size() != 64 || h.find_first_not_of("0123456789abcdef") != std::string::npos)
      return std::nullopt;
    state_type s{};
    for (std::size_t i = 0; i < 4; ++i) s[i] = std::stoull(h.substr(16 * i, 16), nullptr, 16);
    return s;
  }
  // An independent generator derived from this one and a stream id.
  rng split(std::uint64_t stream) const noexcept {
    std::uint64_t s = s_[0] ^ (stream * 0x9e3779b97f4a7c15ULL) ^ rotl(s_[3], 13);
    return rng(s);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix(std::uint64_t& x) noexcept {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
};

}  // namespace paco
