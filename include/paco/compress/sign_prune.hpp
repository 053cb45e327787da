#pragma once
// sign_prune: DiLoCo's TIES-style pruning of outer gradients (ALGORITHMS.md §3.1; TIES-merging,
// Yadav et al. 2023). Each worker trims its pseudo-gradient to the (1 − p) fraction of largest
// magnitude (ties: lowest index) and sends a keep-bitmap plus the kept values. The receiver
// merges with ties_merge: per element, the elected sign is the sign of the sum of the trimmed
// values, and the result is the mean of the values that agree with it (disjoint mean).
// All-gathered on the wire (the merge is not a sum).
//
// Payload (little-endian): bitmap ceil(n/8) bytes (bit i%8 of byte i/8 set iff element i is
// kept; padding bits zero), then the kept values f32[k] in index order, k = kept_count(n, p).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "paco/compress/concepts.hpp"
#include "paco/compress/detail/select.hpp"
#include "paco/compress/detail/wire.hpp"

#if defined(__AVX512F__) && !defined(__CUDACC__)
#include <immintrin.h>
#define PACO_COMPRESS_HOST_AVX512 1
#endif

namespace paco::compress {

struct sign_prune_config {
  double prune = 0.5;  // default level: fraction of elements pruned, in [0, 1)
};

// Elements kept of n when pruning the fraction p. Ensures: n − round(p·n), at least 1 if n > 0.
inline std::size_t kept_count(std::size_t n, double prune) {
  if (n == 0) return 0;
  const double dropped = std::round(prune * static_cast<double>(n));
  return std::max<std::size_t>(1, n - static_cast<std::size_t>(std::min(dropped, double(n))));
}

// sign_prune: TIES trim on the sender; ties_merge on the receiver. The level is the pruned
// fraction. Cost: encode three passes over x; payload n/8 + 4k bytes.
class sign_prune {
 public:
  using compressor_concept = compressor_tag;
  using level_type = double;  // pruned fraction in [0, 1)
  static constexpr wire_reduction reduction = wire_reduction::gather;

  sign_prune() = default;
  explicit sign_prune(sign_prune_config c) : cfg_(c) {}
  const sign_prune_config& config() const noexcept { return cfg_; }

  double default_level() const { return cfg_.prune; }
  // Ensures: ceil(n/8) + 4·kept_count(n, prune).
  std::size_t wire_bytes(std::size_t n, const double& prune) const {
    return (n + 7) / 8 + 4 * kept_count(n, prune);
  }

  // Requires: x finite; out.size() == wire_bytes(x.size(), prune).
  // Ensures: the payload keeps the kept_count largest |x_i| (ties: lowest i), others are zero.
  status encode(slice<const float> x, const double& prune, slice<std::byte> out) {
    if (auto s = check(prune); !s) return s;
    if (auto s = detail::check_out("sign_prune", out.size(), wire_bytes(x.size(), prune)); !s)
      return s;
    const std::size_t n = x.size(), k = kept_count(n, prune);
    auto* bits = reinterpret_cast<std::uint8_t*>(out.data());
    std::memset(bits, 0, (n + 7) / 8);
    const std::size_t written = detail::compact_cut(x.data(), n, sel_.select(x.data(), n, k),
                                                    out.data() + (n + 7) / 8, nullptr, bits);
    PACO_ASSERT(written == k, "sign_prune: selection kept a different count");
    (void)written;
    return {};
  }

  // Ensures: y = the trimmed vector. corrupt if the size is wrong, the bitmap does not hold
  // exactly kept_count bits or a padding bit is set.
  status decode(slice<const std::byte> in, const double& prune, slice<float> y) const {
    if (auto s = check(prune); !s) return s;
    if (auto s = detail::check_in("sign_prune", in.size(), wire_bytes(y.size(), prune)); !s)
      return s;
    const std::size_t n = y.size(), k = kept_count(n, prune), nbytes = (n + 7) / 8;
    const auto* bits = reinterpret_cast<const std::uint8_t*>(in.data());
    std::size_t count = 0;
    for (std::size_t b = 0; b < nbytes; ++b) count += std::popcount(bits[b]);
    if (n % 8 && (bits[nbytes - 1] >> (n % 8)))
      return {errc::corrupt, "sign_prune: padding bits of the bitmap are set"};
    if (count != k)
      return {errc::corrupt, "sign_prune: bitmap keeps " + std::to_string(count) +
                                 " elements, the level keeps " + std::to_string(k)};
    const std::byte* val = in.data() + nbytes;
    std::size_t j = 0, b = 0;
#if defined(PACO_COMPRESS_HOST_AVX512)
    for (; 2 * b + 2 <= n / 8; b += 2) {  // 16 elements per step: expand the kept values
      const unsigned m = bits[b] | (static_cast<unsigned>(bits[b + 1]) << 8);
      const unsigned cnt = static_cast<unsigned>(std::popcount(m));
      // masked load of exactly cnt values (never past the payload), then expand in registers
      const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << cnt) - 1u), val + 4 * j);
      _mm512_storeu_ps(y.data() + 8 * b, _mm512_maskz_expand_ps(static_cast<__mmask16>(m), v));
      j += cnt;
    }
#endif
    for (; b < nbytes; ++b) {
      const std::size_t i0 = 8 * b, len = std::min<std::size_t>(8, n - i0);
      unsigned m = bits[b];
      for (std::size_t t = 0; t < len; ++t) y[i0 + t] = 0.0f;
      while (m) {  // kept elements of this byte, in index order
        const unsigned t = static_cast<unsigned>(std::countr_zero(m));
        y[i0 + t] = detail::load<float>(val + 4 * j++);
        m &= m - 1;
      }
    }
    return {};
  }

  // Ensures: ‖x − trim(x)‖₂.
  double error(const double& prune, slice<const float> x) {
    if (!check(prune)) return INFINITY;
    double e = 0;
    detail::apply_cut(
        x.data(), x.size(), sel_.select(x.data(), x.size(), kept_count(x.size(), prune)),
        [](std::size_t) {}, [&](std::size_t i) { e += double(x[i]) * x[i]; });
    return std::sqrt(e);
  }

 private:
  static status check(double prune) {
    if (!(prune >= 0.0 && prune < 1.0))
      return {errc::invalid_argument,
              "sign_prune: prune = " + std::to_string(prune) + ", accepted [0, 1)"};
    return {};
  }

  sign_prune_config cfg_{};
  detail::magnitude_selector sel_;
};
static_assert(Compressor<sign_prune>);

// TIES merge of P trimmed vectors. Requires: every input has out.size() elements.
// Ensures: out_i = mean{ x_t,i : sign(x_t,i) == sign(Σ_t x_t,i) ≠ 0 }, or 0 if that set is empty.
// Cost: P passes over n floats.
inline status ties_merge(std::span<const slice<const float>> inputs, slice<float> out) {
  for (auto& s : inputs)
    if (s.size() != out.size())
      return {errc::mismatch, "ties_merge: input of " + std::to_string(s.size()) +
                                  " elements, output of " + std::to_string(out.size())};
  for (std::size_t i = 0; i < out.size(); ++i) {
    double total = 0;
    for (auto& s : inputs) total += s[i];
    const int elected = (total > 0) - (total < 0);
    double sum = 0;
    int count = 0;
    for (auto& s : inputs) {
      const float v = s[i];
      if ((elected > 0 && v > 0) || (elected < 0 && v < 0)) {
        sum += v;
        ++count;
      }
    }
    out[i] = count ? static_cast<float>(sum / count) : 0.0f;
  }
  return {};
}

}  // namespace paco::compress
