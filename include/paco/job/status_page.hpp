#pragma once
// The store's status page: one HTML page with no external assets (inline CSS and SVG, no
// script), refreshing itself every 2 s, served at "/" next to "/metrics" on launch.metrics_port.
// It shows the run's progress (rounds closed, seconds per round, ETA), the grid (every module's
// round), each path's workers (round, loss and its curve, throughput, bytes in and out, health),
// the events of the run (workers joining, leaving and coming back, late pushes, rounds closed by
// their deadline) and its configuration. status_board collects what the page shows from the
// store's callbacks (serving thread); page() renders a snapshot (HTTP thread).
// The store holds no held-out figures while the run goes on: validation is the launcher's, after
// the last round (job/results.hpp).
// The curves keep each worker's last curve_rounds rounds (a line says how many earlier ones were
// left out), so the page's size is bounded by the grid and the workers, not the rounds run.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "paco/io/progress.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/store/module_store.hpp"
#include "paco/store/server.hpp"

namespace paco::job {

class status_board {
 public:
  // Rounds of each worker's loss curve kept on the page (≈ 23 bytes per worker and round).
  static constexpr std::size_t curve_rounds = 200;
  // Events kept on the page, the latest.
  static constexpr std::size_t max_events = 40;
  // workers: the store's worker processes, id → its path (−1 when it has none) and name.
  struct process {
    int path = -1;
    std::string name;
  };
  // module_round: each module's round when the store starts serving (a resumed store's).
  // settings: the run's configuration as (key, value), shown as it is given.
  status_board(std::string title, const path::path_plan& g, std::map<int, process> workers,
               long rounds, std::vector<long> module_round,
               std::vector<std::pair<std::string, std::string>> settings = {})
      : title_(std::move(title)),
        plan_(g),
        rounds_(rounds),
        module_round_(std::move(module_round)),
        settings_(std::move(settings)),
        start_(clock::now()) {
    module_round_.resize(std::size_t(g.modules()), 0);
    for (long r : module_round_) to_close_ += std::max(0L, rounds_ - r);
    for (auto& [w, p] : workers) workers_[w].who = p;
  }

  void on_close(const store::round_summary& r) {
    std::lock_guard lk(mu_);
    module_round_[std::size_t(r.module)] = r.round + 1;
    ++closed_;
    if (r.by_deadline || r.by_quorum)
      event("module " + std::to_string(r.module) + " round " + std::to_string(r.round) +
            " closed by its " + (r.by_deadline ? "deadline" : "quorum") + " with " +
            std::to_string(r.arrived) + " of " + std::to_string(r.expected) + " pushes" +
            (r.late_merged > 0 ? " (" + std::to_string(r.late_merged) + " merged late)" : ""));
  }
  void on_traffic(const store::traffic& t) {
    std::lock_guard lk(mu_);
    if (!workers_.count(t.worker)) return;
    auto& w = workers_[t.worker];
    using k = store::traffic::kind;
    if (t.what == k::live) {
      if (t.alive)
        event(w.who.name + (w.seen ? " came back (restarted or reconnected)" : " joined"));
      else
        event(w.who.name + " left (its link closed or went silent)");
      w.health = t.alive ? "live" : "gone";
      if (t.alive) w.seen = true;
      return;
    }
    w.seen = true;
    w.health = "live";
    if (t.what == k::pull) w.bytes_out += t.bytes;
    if (t.what != k::pull) w.bytes_in += t.bytes;
    if (t.what == k::push_late) {
      ++w.late;
      event(w.who.name + "'s push to module " + std::to_string(t.module) + " round " +
            std::to_string(t.round) + " came late (the round had closed): dropped");
    }
    if (t.what == k::push_merged) ++w.merged;
  }
  // Requires: a report the store checked (a round of the run).
  // Ensures: the worker's curve holds at most curve_rounds points, the latest rounds.
  void on_report(const store::worker_report& r) {
    std::lock_guard lk(mu_);
    if (!workers_.count(r.worker)) return;
    auto& w = workers_[r.worker];
    // One point per round: a worker that restarted reports rounds again.
    while (!w.curve.empty() && w.curve.back().first >= double(r.round)) w.curve.pop_back();
    w.curve.push_back({double(r.round), r.loss / 0.6931471805599453});
    if (w.curve.size() > curve_rounds) {
      const auto drop = std::ptrdiff_t(w.curve.size() - curve_rounds);
      w.curve.erase(w.curve.begin(), w.curve.begin() + drop);
      w.left_out += long(drop);
    }
    w.tokens_per_s = r.tokens_per_s;
    w.round = r.round;
  }

  // The page: the state now, rendered.
  std::string page() const {
    std::lock_guard lk(mu_);
    std::string h;
    h.reserve(16384);
    const double up = std::chrono::duration<double>(clock::now() - start_).count();
    long lowest = rounds_;
    for (long r : module_round_) lowest = std::min(lowest, r);
    h += "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" "
         "content=\"2\"><title>" +
         esc(title_) +
         "</title><style>body{font:14px sans-serif;margin:20px;color:#222}table{border-"
         "collapse:collapse;margin:8px 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:"
         "right}th{background:#eee}td.l{text-align:left}.live{color:#080}.gone{color:#b00}"
         ".wait{color:#888}.grid td{text-align:center}</style></head><body>";
    h += "<h1>" + esc(title_) + "</h1><p id=\"progress\">grid " + esc(plan_.describe()) + ": " +
         std::to_string(plan_.paths()) + " paths, " + std::to_string(plan_.modules()) +
         " modules; every module at round &ge; " + std::to_string(lowest) + " of " +
         std::to_string(rounds_) + "; " + std::to_string(closed_) + " rounds closed; up " +
         fmt(up, 0) + " s</p>";
    // Pace: the module rounds closed since the store started against those left.
    h += "<p id=\"pace\">";
    if (closed_ > 0 && to_close_ > 0) {
      const double per_round = up / (double(closed_) / double(plan_.modules()));
      const double left = std::max(0.0, double(to_close_ - closed_));
      h += fmt(per_round, 1) + " s per round; ETA " + io::hms(left / double(closed_) * up) + " (" +
           fmt(100.0 * double(closed_) / double(to_close_), 1) + " % of the rounds closed)";
    } else {
      h += to_close_ > 0 ? "no round closed yet: ETA after the first" : "every round closed";
    }
    h += "</p>";
    // The grid: levels down, experts across; each cell a module and its round.
    h += "<h2>Modules</h2><table class=\"grid\" id=\"grid\"><tr><th>level</th>";
    int widest = 0;
    for (int l = 0; l < plan_.levels(); ++l) widest = std::max(widest, experts_of(l));
    for (int e = 0; e < widest; ++e) h += "<th>expert " + std::to_string(e) + "</th>";
    h += "</tr>";
    for (int l = 0; l < plan_.levels(); ++l) {
      h += "<tr><th>" + std::to_string(l) + "</th>";
      for (int e = 0; e < widest; ++e) {
        const int m = module_at(l, e);
        if (m < 0) {
          h += "<td></td>";
          continue;
        }
        h += "<td>module " + std::to_string(m) + "<br>round " +
             std::to_string(module_round_[std::size_t(m)]) + "</td>";
      }
      h += "</tr>";
    }
    h += "</table>";
    // The workers, by path.
    h += "<h2>Workers</h2><table id=\"workers\"><tr><th>worker</th><th>path</th><th>round</th>"
         "<th>loss (bits/byte)</th><th>curve</th><th>tokens/s</th><th>in (MB)</th><th>out "
         "(MB)</th><th>late</th><th>health</th></tr>";
    for (auto& [id, w] : workers_) {
      const std::string health = w.seen ? w.health : "waiting";
      h += "<tr><td class=\"l\">" + esc(w.who.name) + "</td><td class=\"l\">" +
           (w.who.path >= 0 ? esc(plan_.path_name(w.who.path)) : "") + "</td><td>" +
           (w.round >= 0 ? std::to_string(w.round) : "") + "</td><td>" +
           (w.curve.empty() ? "" : fmt(w.curve.back().second, 3)) + "</td><td>" +
           sparkline(w.curve) + "</td><td>" + fmt(w.tokens_per_s, 0) + "</td><td>" +
           fmt(double(w.bytes_in) / 1e6, 2) + "</td><td>" + fmt(double(w.bytes_out) / 1e6, 2) +
           "</td><td>" + std::to_string(w.late) +
           (w.merged > 0 ? " (" + std::to_string(w.merged) + " merged)" : "") +
           "</td><td class=\"" +
           (health == "live"   ? "live"
            : health == "gone" ? "gone"
                               : "wait") +
           "\">" + health + "</td></tr>";
    }
    h += "</table>";
    h += "<h2>Training loss per worker</h2>";
    long left_out = 0;
    for (auto& [id, w] : workers_) left_out = std::max(left_out, w.left_out);
    if (left_out > 0)
      h += "<p id=\"curve-cap\">the curves show each worker's last " +
           std::to_string(curve_rounds) + " rounds; " + std::to_string(left_out) +
           " earlier rounds left out</p>";
    h += chart();
    h += "<h2>Events</h2><ul id=\"events\">";
    if (events_.empty()) h += "<li>none yet</li>";
    for (auto it = events_.rbegin(); it != events_.rend(); ++it)
      h += "<li>" + io::hms(it->first) + " " + esc(it->second) + "</li>";
    h += "</ul>";
    if (events_dropped_ > 0)
      h += "<p>" + std::to_string(events_dropped_) + " earlier events left out</p>";
    if (!settings_.empty()) {
      h += "<h2>Configuration</h2><details id=\"config\"><summary>" +
           std::to_string(settings_.size()) + " settings</summary><table>";
      for (const auto& [k, v] : settings_)
        h += "<tr><td class=\"l\">" + esc(k) + "</td><td class=\"l\">" + esc(v) + "</td></tr>";
      h += "</table></details>";
    }
    h += "<p><a href=\"/metrics\">/metrics</a> (Prometheus)</p></body></html>";
    return h;
  }

 private:
  using clock = std::chrono::steady_clock;
  struct worker_state {
    process who;
    bool seen = false;
    std::string health = "waiting";
    long round = -1;
    double tokens_per_s = 0;
    std::size_t bytes_in = 0, bytes_out = 0;
    long late = 0;    // pushes dropped: their round had closed
    long merged = 0;  // pushes merged late into a later round (store::module_store::merge_late)
    std::vector<std::pair<double, double>> curve;  // (round, bits/byte), the last curve_rounds
    long left_out = 0;                             // earlier rounds dropped from curve
  };

  // Requires: mu_ held.
  void event(std::string what) {
    events_.emplace_back(std::chrono::duration<double>(clock::now() - start_).count(),
                         std::move(what));
    if (events_.size() > max_events) events_.pop_front(), ++events_dropped_;
  }
  int experts_of(int l) const {
    int n = 0;
    for (int m = 0; m < plan_.modules(); ++m)
      if (plan_.level_of(m) == l) ++n;
    return n;
  }
  int module_at(int l, int e) const {
    int n = 0;
    for (int m = 0; m < plan_.modules(); ++m)
      if (plan_.level_of(m) == l && n++ == e) return m;
    return -1;
  }
  static std::string fmt(double v, int digits) {
    if (!std::isfinite(v)) return "-";
    char b[48];
    std::snprintf(b, sizeof b, "%.*f", digits, v);
    return b;
  }
  static std::string esc(const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '<')
        o += "&lt;";
      else if (c == '>')
        o += "&gt;";
      else if (c == '&')
        o += "&amp;";
      else if (c == '"')
        o += "&quot;";
      else
        o += c;
    }
    return o;
  }
  // An SVG polyline of points scaled into w × h (empty: no points).
  static std::string polyline(const std::vector<std::pair<double, double>>& pts, double x0,
                              double x1, double y0, double y1, int w, int h, int pad,
                              const char* colour) {
    if (pts.empty()) return "";
    std::string p;
    for (auto [x, y] : pts) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      const double px = pad + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (w - 2 * pad);
      const double py = pad + (y1 > y0 ? (y1 - y) / (y1 - y0) : 0.5) * (h - 2 * pad);
      p += fmt(px, 1) + "," + fmt(py, 1) + " ";
    }
    return std::string("<polyline fill=\"none\" stroke=\"") + colour +
           "\" stroke-width=\"1.5\" points=\"" + p + "\"/>";
  }
  static void bounds(const std::vector<std::pair<double, double>>& pts, double& x0, double& x1,
                     double& y0, double& y1) {
    for (auto [x, y] : pts) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  static std::string sparkline(const std::vector<std::pair<double, double>>& pts) {
    double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
    bounds(pts, x0, x1, y0, y1);
    return "<svg width=\"120\" height=\"24\">" + polyline(pts, x0, x1, y0, y1, 120, 24, 2, "#36c") +
           "</svg>";
  }
  std::string chart() const {
    static const char* colours[] = {"#36c", "#c33", "#393", "#f90", "#909", "#099", "#663", "#333"};
    double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
    for (auto& [id, w] : workers_) bounds(w.curve, x0, x1, y0, y1);
    const int W = 640, H = 240, pad = 30;
    std::string s = "<svg id=\"chart\" width=\"" + std::to_string(W) + "\" height=\"" +
                    std::to_string(H) + "\" style=\"border:1px solid #ccc\">";
    if (x1 >= x0) {
      s += "<text x=\"4\" y=\"14\" font-size=\"11\">" + fmt(y1, 2) +
           " bits/byte</text><text x=\"4\" y=\"" + std::to_string(H - 4) + "\" font-size=\"11\">" +
           fmt(y0, 2) + "</text><text x=\"" + std::to_string(W - 90) + "\" y=\"" +
           std::to_string(H - 4) + "\" font-size=\"11\">round " + fmt(x1, 0) + "</text>";
      int i = 0;
      for (auto& [id, w] : workers_) {
        const char* c = colours[i++ % 8];
        s += polyline(w.curve, x0, x1, y0, y1, W, H, pad, c);
        s += "<text x=\"" + std::to_string(W - 150) + "\" y=\"" + std::to_string(14 + 13 * i) +
             "\" font-size=\"11\" fill=\"" + c + "\">" + esc(w.who.name) + "</text>";
      }
    } else {
      s += "<text x=\"20\" y=\"40\">no round reported yet</text>";
    }
    return s + "</svg>";
  }

  std::string title_;
  const path::path_plan& plan_;
  long rounds_;
  mutable std::mutex mu_;
  std::vector<long> module_round_;
  std::vector<std::pair<std::string, std::string>> settings_;
  long closed_ = 0;
  long to_close_ = 0;  // module rounds left when the store started
  std::map<int, worker_state> workers_;
  std::deque<std::pair<double, std::string>> events_;  // (seconds since start, what)
  long events_dropped_ = 0;
  clock::time_point start_;
};

}  // namespace paco::job
