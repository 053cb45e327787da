#pragma once
// level_map: which part of a model's arena each grid level owns. A level is a run of
// consecutive layout entries (e.g. level 0 = embed, block.0, block.1; level 1 = block.2,
// block.3, ln_f, head), so its parameters are one contiguous span of the path's arena: the
// unit the module store keeps, the outer optimizer updates and the sync layer moves.

#include <cstddef>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"

namespace paco::path {

struct level_span {
  std::size_t offset = 0;  // elements from the start of the arena plane
  std::size_t size = 0;    // elements (from the first entry's start to the last entry's end)
  std::vector<std::string> entries;
};

// Builds spans from entry names per level. Errors: a name not in the layout, entries of a level
// not consecutive, or an entry in two levels / in none.
inline result<std::vector<level_span>> make_level_map(
    const param_layout& layout, const std::vector<std::vector<std::string>>& levels) {
  std::vector<level_span> out;
  std::vector<int> owner(layout.count(), -1);
  for (std::size_t l = 0; l < levels.size(); ++l) {
    if (levels[l].empty())
      return error(errc::invalid_argument, "level " + std::to_string(l) + " has no entries");
    std::size_t prev = 0;
    level_span s;
    for (std::size_t k = 0; k < levels[l].size(); ++k) {
      auto id = layout.find(levels[l][k]);
      if (!id)
        return error(errc::invalid_argument, "level " + std::to_string(l) + ": no module named '" +
                                                 levels[l][k] + "' in the model");
      if (owner[*id] >= 0)
        return error(errc::invalid_argument, "module '" + levels[l][k] + "' is in levels " +
                                                 std::to_string(owner[*id]) + " and " +
                                                 std::to_string(l));
      if (k > 0 && *id != prev + 1)
        return error(errc::invalid_argument, "level " + std::to_string(l) +
                                                 ": modules must be consecutive in the model ('" +
                                                 levels[l][k] + "' does not follow '" +
                                                 levels[l][k - 1] + "')");
      owner[*id] = int(l);
      prev = *id;
      s.entries.push_back(levels[l][k]);
    }
    const auto& first = layout.entry(*layout.find(levels[l].front()));
    const auto& last = layout.entry(*layout.find(levels[l].back()));
    s.offset = first.offset;
    s.size = last.offset + last.size - first.offset;
    out.push_back(std::move(s));
  }
  for (std::size_t i = 0; i < layout.count(); ++i)
    if (owner[i] < 0)
      return error(errc::invalid_argument,
                   "module '" + layout.entry(i).name + "' belongs to no level");
  return out;
}

// Splits a GPT-style layout (embed, block.0 … block.{n−1}, ln_f[, head]) into `levels` levels of
// consecutive blocks: level 0 gets the embedding, the last level ln_f and the head.
// Requires: 1 ≤ levels ≤ number of blocks.
inline result<std::vector<level_span>> split_gpt_levels(const param_layout& layout, int blocks,
                                                        int levels) {
  if (levels < 1 || levels > std::max(blocks, 1))
    return error(errc::invalid_argument, "cannot split " + std::to_string(blocks) +
                                             " blocks into " + std::to_string(levels) + " levels");
  std::vector<std::vector<std::string>> names(levels);
  names[0].push_back("embed");
  for (int b = 0; b < blocks; ++b)
    names[std::size_t(b) * levels / blocks].push_back("block." + std::to_string(b));
  names.back().push_back("ln_f");
  if (layout.find("head")) names.back().push_back("head");
  return make_level_map(layout, names);
}

}  // namespace paco::path
