#pragma once
// powersgd: rank-r PowerSGD (Vogels et al. 2019; ALGORITHMS.md §5.1–5.2) as a two-round
// compressor over a row-major matrix view M (rows, cols) of a module's span, with a warm-started
// Q kept in per-module state. Both rounds' payloads are summed on the wire.
//
//   round 0   P = M·Q                      payload P (rows, r) f32      → all-reduce (sum)
//   round 1   P ← orth(ΣP); Q = Mᵀ·P       payload Q (cols, r) f32      → all-reduce (sum)
//   decode    Q ← ΣQ / world; M̂ = P·Qᵀ     (Q is kept: the warm start of the next step)
//
// Error feedback (§5.2) is the caller's: M = g + e before round 0, e ← M − M̂ after decode
// (ef_accumulate / ef_subtract in error_feedback.hpp).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "paco/compress/concepts.hpp"
#include "paco/compress/detail/wire.hpp"
#include "paco/core/rng.hpp"
#include "paco/nn/gemm.hpp"

namespace paco::compress {

struct powersgd_config {
  int rank = 4;                 // default level r0 (L-GreCo: ranks ⌊γ r0⌋ … ⌈β r0⌉)
  std::uint64_t seed = 0x5eed;  // every worker draws the same initial Q from it
  int error_iterations = 5;     // power iterations of the L-GreCo error model ('Power')
};

// Per-module state: the factors and the shape they belong to.
struct powersgd_state {
  matrix_shape shape{};
  int rank = 0;
  std::vector<float> p;  // (rows, r) row-major
  std::vector<float> q;  // (cols, r) row-major
};

// powersgd: the level is the rank. Cost per step: 2·rows·cols·r flops ×2, bytes (rows+cols)·r·4.
class powersgd {
 public:
  using compressor_concept = multi_round_tag;
  using level_type = int;
  using state_type = powersgd_state;
  static constexpr int rounds = 2;
  static constexpr wire_reduction reduction = wire_reduction::sum;

  powersgd() = default;
  explicit powersgd(powersgd_config c) : cfg_(c) {}
  const powersgd_config& config() const noexcept { return cfg_; }
  int default_level() const { return cfg_.rank; }

  // Ensures: round 0 sends rows·r floats, round 1 cols·r floats.
  std::size_t round_bytes(matrix_shape s, const int& r, int round) const {
    return 4 * static_cast<std::size_t>(r) * (round == 0 ? s.rows : s.cols);
  }
  // Ensures: (rows + cols)·r·4.
  std::size_t wire_bytes(matrix_shape s, const int& r) const {
    return 4 * static_cast<std::size_t>(r) * (s.rows + s.cols);
  }

  // Requires: 1 <= r <= min(rows, cols). Ensures: st holds Q ~ N(0,1) drawn from the seed (the
  // same on every worker) and P = 0.
  status init(powersgd_state& st, matrix_shape s, const int& r) {
    if (r < 1 || static_cast<std::size_t>(r) > std::min(s.rows, s.cols))
      return {errc::invalid_argument, "powersgd: rank = " + std::to_string(r) +
                                          ", accepted [1, min(rows, cols)] = [1, " +
                                          std::to_string(std::min(s.rows, s.cols)) + "]"};
    st.shape = s;
    st.rank = r;
    st.p.assign(s.rows * static_cast<std::size_t>(r), 0.0f);
    st.q.resize(s.cols * static_cast<std::size_t>(r));
    rng g(cfg_.seed);
    for (auto& v : st.q) v = static_cast<float>(g.normal());
    return {};
  }

  // Round 0 (summed empty): out = M·Q. Round 1 (summed = Σ_workers P): P = orth(ΣP); out = Mᵀ·P.
  // Requires: init(st, ...); m.size() == rows·cols; out.size() == round_bytes(.., round).
  status encode_round(powersgd_state& st, int round, slice<const float> m,
                      slice<const std::byte> summed, slice<std::byte> out) {
    const auto s = st.shape;
    const std::size_t r = static_cast<std::size_t>(st.rank);
    if (st.rank < 1) return {errc::invalid_argument, "powersgd: state not initialised"};
    if (m.size() != s.size())
      return {errc::mismatch, "powersgd: span of " + std::to_string(m.size()) +
                                  " elements, state shape " + std::to_string(s.rows) + "x" +
                                  std::to_string(s.cols)};
    if (round != 0 && round != 1)
      return {errc::invalid_argument,
              "powersgd: round = " + std::to_string(round) + ", accepted 0 or 1"};
    if (auto e = detail::check_out("powersgd", out.size(), round_bytes(s, st.rank, round)); !e)
      return e;
    if (round == 0) {
      if (!summed.empty())
        return {errc::invalid_argument, "powersgd: round 0 takes no summed payload"};
      std::vector<float> p(s.rows * r);
      product(m.data(), st.q.data(), p.data(), s.rows, s.cols, r, nn::trans::no);  // M·Q
      std::memcpy(out.data(), p.data(), out.size());
      return {};
    }
    if (auto e = detail::check_in("powersgd", summed.size(), round_bytes(s, st.rank, 0)); !e)
      return e;
    std::memcpy(st.p.data(), summed.data(), summed.size());
    orthogonalise(st.p.data(), s.rows, r);
    std::vector<float> q(s.cols * r);
    product(m.data(), st.p.data(), q.data(), s.rows, s.cols, r, nn::trans::yes);  // Mᵀ·P
    std::memcpy(out.data(), q.data(), out.size());
    return {};
  }

  // Requires: summed = Σ_workers of round 1's payloads; world >= 1; y.size() == rows·cols.
  // Ensures: Q = summed/world (kept for the warm start); y = P·Qᵀ.
  status decode(powersgd_state& st, slice<const std::byte> summed, std::size_t world,
                slice<float> y) {
    const auto s = st.shape;
    const std::size_t r = static_cast<std::size_t>(st.rank);
    if (st.rank < 1) return {errc::invalid_argument, "powersgd: state not initialised"};
    if (world < 1) return {errc::invalid_argument, "powersgd: world = 0, accepted >= 1"};
    if (auto e = detail::check_in("powersgd", summed.size(), round_bytes(s, st.rank, 1)); !e)
      return e;
    if (y.size() != s.size())
      return {errc::mismatch, "powersgd: output of " + std::to_string(y.size()) + " elements"};
    std::memcpy(st.q.data(), summed.data(), summed.size());
    const float inv = 1.0f / static_cast<float>(world);
    for (auto& v : st.q) v *= inv;
    const int rows = int(s.rows), cols = int(s.cols), rank = int(r);
    nn::gemm<float>(nn::trans::no, nn::trans::yes, rows, cols, rank, 1.0f, st.p.data(), rank,
                    st.q.data(), rank, 0.0f, y.data(), cols);  // P·Qᵀ
    return {};
  }

  // L-GreCo error model ('Power'): ‖G − P Qᵀ‖_F after error_iterations power steps from a seeded
  // N(0,1) start, computed as sqrt(‖G‖² − ‖Pᵀ G‖²) with P orthonormal.
  double error(matrix_shape s, const int& r, slice<const float> g) {
    if (r < 1 || static_cast<std::size_t>(r) > std::min(s.rows, s.cols) || g.size() != s.size())
      return INFINITY;
    const std::size_t rr = static_cast<std::size_t>(r);
    rng gen(cfg_.seed ^ 0xe77);
    std::vector<float> q(s.cols * rr), p(s.rows * rr);
    for (auto& v : q) v = static_cast<float>(gen.normal());
    for (int it = 0; it < std::max(1, cfg_.error_iterations); ++it) {
      orthogonalise(q.data(), s.cols, rr);
      product(g.data(), q.data(), p.data(), s.rows, s.cols, rr, nn::trans::no);  // G·Q
      orthogonalise(p.data(), s.rows, rr);
      product(g.data(), p.data(), q.data(), s.rows, s.cols, rr, nn::trans::yes);  // Gᵀ·P
    }
    double total = 0, kept = 0;
    for (std::size_t i = 0; i < g.size(); ++i) total += double(g[i]) * g[i];
    for (float v : q) kept += double(v) * v;
    return std::sqrt(std::max(0.0, total - kept));
  }

  // Modified Gram–Schmidt on the columns of a (rows, r) row-major matrix, in double, with the
  // PyTorch hook's ε so a zero column stays finite. Ensures: columns orthonormal (or zero).
  static void orthogonalise(float* a, std::size_t rows, std::size_t r) {
    constexpr double eps = 1e-8;
    for (std::size_t c = 0; c < r; ++c) {
      double norm = 0;
      for (std::size_t i = 0; i < rows; ++i) norm += double(a[i * r + c]) * a[i * r + c];
      const double inv = 1.0 / (std::sqrt(norm) + eps);
      for (std::size_t i = 0; i < rows; ++i) a[i * r + c] = static_cast<float>(a[i * r + c] * inv);
      for (std::size_t d = c + 1; d < r; ++d) {
        double dot = 0;
        for (std::size_t i = 0; i < rows; ++i) dot += double(a[i * r + c]) * a[i * r + d];
        for (std::size_t i = 0; i < rows; ++i)
          a[i * r + d] = static_cast<float>(a[i * r + d] - dot * a[i * r + c]);
      }
    }
  }

 private:
  // out = M·F (rows, r) when t = no, Mᵀ·F (cols, r) when t = yes; M is (rows, cols) row-major,
  // F is (cols, r) or (rows, r) row-major. Through the host GEMM every nn module uses.
  static void product(const float* M, const float* F, float* out, std::size_t rows,
                      std::size_t cols, std::size_t r, nn::trans t) {
    const int m = int(rows), n = int(cols), k = int(r);
    if (t == nn::trans::no)
      nn::gemm<float>(nn::trans::no, nn::trans::no, m, k, n, 1.0f, M, n, F, k, 0.0f, out, k);
    else
      nn::gemm<float>(nn::trans::yes, nn::trans::no, n, k, m, 1.0f, M, n, F, k, 0.0f, out, k);
  }

  powersgd_config cfg_{};
};
static_assert(MultiRoundCompressor<powersgd>);

}  // namespace paco::compress
