#pragma once
// topk: keeps the k = round(density·n) elements of largest magnitude (ties: lowest index) and
// sends them as (index, value) pairs. All-gathered on the wire (index sets differ per worker).
//
// Payload (little-endian): indices u32[k] strictly increasing, then values f32[k].

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "paco/compress/concepts.hpp"
#include "paco/compress/detail/select.hpp"
#include "paco/compress/detail/wire.hpp"

namespace paco::compress {

struct topk_config {
  double density = 0.01;  // default level: fraction of elements kept, in (0, 1]
};

// The number of elements topk keeps of n at `density`. Ensures: 0 for n = 0, else in [1, n].
inline std::size_t topk_count(std::size_t n, double density) {
  if (n == 0) return 0;
  const double k = std::round(density * static_cast<double>(n));
  return static_cast<std::size_t>(std::clamp(k, 1.0, static_cast<double>(n)));
}

// topk: sparse codec; the level is the density. Cost: encode three passes over x plus 8k bytes
// written; decode writes 4n bytes (zeros) and scatters k values.
class topk {
 public:
  using compressor_concept = compressor_tag;
  using level_type = double;  // density in (0, 1]
  static constexpr wire_reduction reduction = wire_reduction::gather;

  topk() = default;
  explicit topk(topk_config c) : cfg_(c) {}
  const topk_config& config() const noexcept { return cfg_; }

  double default_level() const { return cfg_.density; }
  // Ensures: 8·topk_count(n, density).
  std::size_t wire_bytes(std::size_t n, const double& density) const {
    return 8 * topk_count(n, density);
  }

  // Requires: x finite; x.size() < 2^32; out.size() == wire_bytes(x.size(), density).
  // Ensures: the payload holds the k largest |x_i| (ties: lowest i) with increasing indices.
  status encode(slice<const float> x, const double& density, slice<std::byte> out) {
    if (auto s = check(density, x.size()); !s) return s;
    if (auto s = detail::check_out("topk", out.size(), wire_bytes(x.size(), density)); !s) return s;
    const std::size_t n = x.size(), k = topk_count(n, density);
    const auto cut = sel_.select(x.data(), n, k);
    const std::size_t written =
        detail::compact_cut(x.data(), n, cut, out.data() + 4 * k, out.data(), nullptr);
    PACO_ASSERT(written == k, "topk: selection kept a different count");
    (void)written;
    return {};
  }

  // Ensures: y = 0 except y[idx_j] = val_j. corrupt if the size is not wire_bytes(n, density)
  // or the indices are not strictly increasing and < n (y is then unspecified).
  status decode(slice<const std::byte> in, const double& density, slice<float> y) const {
    if (auto s = check(density, y.size()); !s) return s;
    if (auto s = detail::check_in("topk", in.size(), wire_bytes(y.size(), density)); !s) return s;
    const std::size_t n = y.size(), k = topk_count(n, density);
    if (n) std::memset(y.data(), 0, y.size_bytes());
    const std::byte* idx = in.data();
    const std::byte* val = in.data() + 4 * k;
    std::uint64_t prev = 0;
    for (std::size_t j = 0; j < k; ++j) {
      const std::uint32_t i = detail::load<std::uint32_t>(idx + 4 * j);
      if (i >= n || (j > 0 && i <= prev))
        return {errc::corrupt, "topk: index " + std::to_string(j) + " = " + std::to_string(i) +
                                   " is out of range or not increasing"};
      prev = i;
      y[i] = detail::load<float>(val + 4 * j);
    }
    return {};
  }

  // Ensures: ‖x − topk(x)‖₂ (the norm of what is dropped).
  double error(const double& density, slice<const float> x) {
    if (!check(density, x.size())) return INFINITY;
    const auto cut = sel_.select(x.data(), x.size(), topk_count(x.size(), density));
    double e = 0;
    detail::apply_cut(
        x.data(), x.size(), cut, [](std::size_t) {},
        [&](std::size_t i) { e += double(x[i]) * x[i]; });
    return std::sqrt(e);
  }

 private:
  static status check(double density, std::size_t n) {
    if (!(density > 0.0 && density <= 1.0))
      return {errc::invalid_argument,
              "topk: density = " + std::to_string(density) + ", accepted (0, 1]"};
    if (n > std::numeric_limits<std::uint32_t>::max())
      return {errc::invalid_argument, "topk: span of " + std::to_string(n) +
                                          " elements, accepted at most 2^32 - 1 (u32 indices)"};
    return {};
  }

  topk_config cfg_{};
  detail::magnitude_selector sel_;
};
static_assert(Compressor<topk>);

}  // namespace paco::compress
