#pragma once
// The orders in which a pipeline stage runs its micro-batches' forward (F) and backward (B)
// passes in one optimizer step of global backprop, and a validator for them.
//
//   gpipe        F_0 … F_{M−1}, then B_{M−1} … B_0 (Huang et al.: every forward, then every
//                backward); a stage stashes all M micro-batches.
//   one_f_one_b  w = min(K − k − 1, M) warm-up forwards, then M − w pairs (F_{w+i}, B_i), then
//                the last w backwards (PipeDream-flush, as Megatron-LM runs it); the backward
//                order is 0 … M−1 and stage k stashes at most min(K − k, M) micro-batches.
//   local        local losses (Laskin et al.): one micro-batch per step, F then its own B, no
//                backward messages; its order is trivial and lives in stage_runner.
// Both global schedules have the same bubble, (K−1)/(M+K−1) of a step.

#include <algorithm>
#include <string>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::pipeline {

enum class schedule { gpipe, one_f_one_b, local };

inline const char* name(schedule s) {
  return s == schedule::gpipe ? "gpipe" : s == schedule::one_f_one_b ? "1f1b" : "local";
}
// Ensures: the schedule named s (gpipe, 1f1b, local), or invalid_argument naming `field`.
inline result<schedule> parse_schedule(const std::string& s,
                                       const std::string& field = "pipeline.schedule") {
  if (s == "gpipe") return schedule::gpipe;
  if (s == "1f1b") return schedule::one_f_one_b;
  if (s == "local") return schedule::local;
  return paco::error(errc::invalid_argument,
                     field + ": '" + s + "' is not a schedule (gpipe, 1f1b or local)");
}

struct op {
  enum kind_t { forward, backward } kind;
  int micro;  // 0 … M−1
  bool operator==(const op&) const = default;
};

// Stage k's ops in one step of a global schedule (gpipe or one_f_one_b) over K stages and M
// micro-batches. Requires: 0 ≤ k < K, M ≥ 1.
inline std::vector<op> stage_ops(schedule s, int K, int k, int M) {
  std::vector<op> ops;
  if (s == schedule::gpipe) {
    for (int m = 0; m < M; ++m) ops.push_back({op::forward, m});
    for (int m = M - 1; m >= 0; --m) ops.push_back({op::backward, m});
    return ops;
  }
  const int w = std::min(K - k - 1, M);
  for (int m = 0; m < w; ++m) ops.push_back({op::forward, m});
  for (int i = 0; i < M - w; ++i) {
    ops.push_back({op::forward, w + i});
    ops.push_back({op::backward, i});
  }
  for (int m = M - w; m < M; ++m) ops.push_back({op::backward, m});
  return ops;
}

// The largest number of micro-batches stage k holds between a forward and its backward.
inline int stash_needed(const std::vector<op>& ops) {
  int live = 0, most = 0;
  for (const op& o : ops) {
    live += o.kind == op::forward ? 1 : -1;
    most = std::max(most, live);
  }
  return most;
}

// Checks a whole schedule (every stage's ops) by running it as the stages would: each (k, m)
// has one F and one B; F_{k,m} after F_{k−1,m}; B_{k,m} after F_{k,m} and after B_{k+1,m}; and
// the stages, each running its ops in order and waiting only for those messages, all finish
// (no deadlock). Ensures: ok, or invalid_argument naming the first violation.
inline status validate_schedule(const std::vector<std::vector<op>>& stages, int M) {
  const int K = int(stages.size());
  auto bad = [](std::string m) { return status(errc::invalid_argument, "schedule: " + m); };
  for (int k = 0; k < K; ++k)
    for (int m = 0; m < M; ++m) {
      const auto n_f = std::count(stages[k].begin(), stages[k].end(), op{op::forward, m});
      const auto n_b = std::count(stages[k].begin(), stages[k].end(), op{op::backward, m});
      if (n_f != 1 || n_b != 1)
        return bad("stage " + std::to_string(k) + " runs micro-batch " + std::to_string(m) +
                   " forward " + std::to_string(n_f) + " and backward " + std::to_string(n_b) +
                   " times (once each)");
    }
  std::vector<std::vector<char>> f_done(K, std::vector<char>(M)), b_done = f_done;
  std::vector<std::size_t> pc(K, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int k = 0; k < K; ++k) {
      while (pc[k] < stages[k].size()) {
        const op o = stages[k][pc[k]];
        const bool ready = o.kind == op::forward
                               ? (k == 0 || f_done[k - 1][o.micro])
                               : (f_done[k][o.micro] && (k + 1 == K || b_done[k + 1][o.micro]));
        if (!ready) break;
        (o.kind == op::forward ? f_done : b_done)[k][o.micro] = 1;
        ++pc[k];
        moved = true;
      }
    }
  }
  for (int k = 0; k < K; ++k)
    if (pc[k] < stages[k].size())
      return bad("stage " + std::to_string(k) + " waits forever at op " + std::to_string(pc[k]) +
                 " (" + (stages[k][pc[k]].kind == op::forward ? "F" : "B") +
                 std::to_string(stages[k][pc[k]].micro) + ")");
  return {};
}

}  // namespace paco::pipeline
