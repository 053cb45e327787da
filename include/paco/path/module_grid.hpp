#pragma once
// module_grid<L>: DiPaCo's grid of modules, L levels (a compile-time count) × a run-time number
// of experts per level. A path takes one expert per level; P = Π K_l paths, indexed in mixed
// radix with level 0 most significant. A level with one expert is shared by every path; a
// path-specific level has one module per path (it is not a factor of P). Modules get flat ids
// 0 … module_count()−1, level by level.

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::path {

// One module as a store holds it: its id, its size and the pushes it expects per round
// (path_plan::module_table builds the table of a plan).
struct module_info {
  int id = 0;
  std::size_t size = 0;   // elements
  int paths_through = 1;  // P_{l,e}: pushes expected per round
};

struct level_spec {
  int experts = 1;             // K_l (ignored when path_specific)
  bool path_specific = false;  // one module per path (DiPaCo's "path-specific modules")
};

// One expert per level. Ensures (for paths from a grid): 0 ≤ expert[l] < modules at level l.
template <std::size_t L>
struct path {
  std::array<int, L> expert{};
  friend bool operator==(const path&, const path&) = default;
};

template <std::size_t L>
class module_grid {
  static_assert(L >= 1, "a grid has at least one level");

 public:
  static constexpr std::size_t levels = L;

  // Requires: experts ≥ 1 on every level (checked: throws error_exception naming the level).
  explicit module_grid(std::array<level_spec, L> spec) : spec_(spec) {
    paths_ = 1;
    for (std::size_t l = 0; l < L; ++l) {
      if (!spec_[l].path_specific && spec_[l].experts < 1)
        throw error_exception({errc::invalid_argument,
                               "module_grid: level " + std::to_string(l) + " needs ≥ 1 expert"});
      if (!spec_[l].path_specific) paths_ *= spec_[l].experts;
    }
    int id = 0;
    for (std::size_t l = 0; l < L; ++l) {
      first_id_[l] = id;
      id += modules_at(l);
    }
    modules_ = id;
  }
  // A grid of K_l experts per level, none path-specific.
  static module_grid experts(std::array<int, L> k) {
    std::array<level_spec, L> s{};
    for (std::size_t l = 0; l < L; ++l) s[l].experts = k[l];
    return module_grid(s);
  }

  int paths() const noexcept { return paths_; }
  // Modules at level l: K_l, or P for a path-specific level.
  int modules_at(std::size_t l) const noexcept {
    return spec_[l].path_specific ? paths_ : spec_[l].experts;
  }
  int module_count() const noexcept { return modules_; }
  bool path_specific(std::size_t l) const noexcept { return spec_[l].path_specific; }
  const level_spec& spec(std::size_t l) const noexcept { return spec_[l]; }

  // Flat id of module (l, e). Requires: e < modules_at(l).
  int module_id(std::size_t l, int e) const noexcept { return first_id_[l] + e; }
  // (level, expert) of a flat module id.
  std::pair<std::size_t, int> module_at(int id) const noexcept {
    std::size_t l = L - 1;
    while (l > 0 && first_id_[l] > id) --l;
    return {l, id - first_id_[l]};
  }

  // The path with mixed-radix index i (level 0 most significant). Requires: 0 ≤ i < paths().
  path<L> path_at(int i) const {
    PACO_ASSERT(i >= 0 && i < paths_, "path index out of range");
    path<L> p;
    int rest = i;
    for (std::size_t l = L; l-- > 0;) {
      if (spec_[l].path_specific) continue;
      p.expert[l] = rest % spec_[l].experts;
      rest /= spec_[l].experts;
    }
    for (std::size_t l = 0; l < L; ++l)
      if (spec_[l].path_specific) p.expert[l] = i;
    return p;
  }
  // Inverse of path_at. Ensures: path_at(index_of(p)) == p.
  int index_of(const path<L>& p) const {
    int i = 0;
    for (std::size_t l = 0; l < L; ++l)
      if (!spec_[l].path_specific) i = i * spec_[l].experts + p.expert[l];
    return i;
  }

  // Flat module ids of path i, one per level.
  std::array<int, L> modules_of(int i) const {
    auto p = path_at(i);
    std::array<int, L> m;
    for (std::size_t l = 0; l < L; ++l) m[l] = module_id(l, p.expert[l]);
    return m;
  }
  // P_{l,e}: how many paths go through module (l, e).
  int paths_through(std::size_t l, int) const noexcept {
    return spec_[l].path_specific ? 1 : paths_ / spec_[l].experts;
  }
  // Indices of the paths through module (l, e), ascending.
  std::vector<int> paths_of(std::size_t l, int e) const {
    std::vector<int> r;
    for (int i = 0; i < paths_; ++i)
      if (path_at(i).expert[l] == e) r.push_back(i);
    return r;
  }

  std::string describe() const {
    std::string s;
    for (std::size_t l = 0; l < L; ++l) {
      if (l) s += "x";
      s += spec_[l].path_specific ? "P" : std::to_string(spec_[l].experts);
    }
    return s;
  }

 private:
  std::array<level_spec, L> spec_;
  std::array<int, L> first_id_{};
  int paths_ = 1;
  int modules_ = 0;
};

}  // namespace paco::path
