#pragma once
// push_pace: how long after a module's round opened its on-time pushes arrive — each round's
// lower median, then the lower median of the last `window` rounds' — the pace of the module's
// faster workers. A
// worker paced by measurement (worker_loop_options::pace_measured) trains within it; the store
// service sends it in its wait replies (store/wire.hpp), local_store answers push_time_s. Pushes
// merged late are not on time and do not count, so behind a quorum the pace is the quorum's.
//
//   store::push_pace p;
//   p.pushed(m, 1.9);  p.pushed(m, 8.0);  p.closed(m);   // p.seconds(m) == 1.9
//
// Not thread-safe: its store guards it.

#include <cstddef>
#include <map>
#include <vector>

#include "paco/core/stats.hpp"

namespace paco::store {

class push_pace {
 public:
  // Requires: window ≥ 1.
  explicit push_pace(std::size_t window = 8) : window_(window) {}

  // An on-time push of module m arrived `after_open_s` seconds after its round opened.
  void pushed(int m, double after_open_s) { open_[m].push_back(after_open_s); }
  // Module m's round closed: the lower median of its on-time pushes' times joins the window (a
  // round without one changes nothing). Lower: a module two workers share is paced by the
  // faster.
  void closed(int m) {
    auto it = open_.find(m);
    if (it == open_.end()) return;
    if (!it->second.empty())
      rounds_.try_emplace(m, window_, stats::recent_median::lower)
          .first->second.add(stats::recent_median::of(it->second, stats::recent_median::lower));
    open_.erase(it);
  }
  // Ensures: the lower median over the window of the rounds' median push times; 0 before any.
  double seconds(int m) const {
    const auto it = rounds_.find(m);
    return it == rounds_.end() ? 0.0 : it->second.value();
  }

 private:
  std::size_t window_;
  std::map<int, std::vector<double>> open_;     // the open round's push times
  std::map<int, stats::recent_median> rounds_;  // the last rounds' medians
};

}  // namespace paco::store
