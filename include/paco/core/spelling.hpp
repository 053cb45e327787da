#pragma once
// spelling: the closest of a set of names to one that is not among them (a mistyped setting,
// flag or role), for "unknown setting 'trian.steps' (did you mean 'train.steps'?)".
//
//   if (auto m = closest_name("trian.steps", keys)) msg += " (did you mean '" + *m + "'?)";

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace paco {

// The Damerau–Levenshtein (optimal string alignment) distance: insertions, deletions,
// substitutions and transpositions of two adjacent characters, each 1. Cost: O(|a|·|b|).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> d((n + 1) * (m + 1));
  auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * (m + 1) + j]; };
  for (std::size_t i = 0; i <= n; ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= m; ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
    }
  return at(n, m);
}

// The candidate nearest to `word` (edit_distance), if it is near enough to be a likely typo: at
// most max(1, |word| / 4) edits away (a third of a short word is another word). Ties: the first.
inline std::optional<std::string> closest_name(std::string_view word,
                                               const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(1, word.size() / 4);
  std::optional<std::string> best;
  std::size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    const std::size_t dist = edit_distance(word, c);
    if (dist < best_d) best_d = dist, best = c;
  }
  return best;
}

}  // namespace paco
