#pragma once
// progress: a one-line progress display for long loops (training, searches, benchmarks).
// On a terminal it redraws one line in place; otherwise (CI logs, pipes) it prints a plain line
// at most every `min_interval` seconds, so logs stay readable.

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

namespace paco::io {

// Seconds as "m:ss", or "h:mm:ss" from an hour on (rounded to the second).
inline std::string hms(double s) {
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

class progress {
 public:
  struct options {
    std::FILE* out = stderr;
    double min_interval_s = 0.1;   // redraw rate on a terminal
    double log_interval_s = 10.0;  // line rate when not a terminal
    int bar_width = 24;
  };

  // Requires: total > 0.
  progress(std::string label, long long total) : progress(std::move(label), total, options{}) {}
  progress(std::string label, long long total, options o)
      : label_(std::move(label)),
        total_(total > 0 ? total : 1),
        o_(o),
        tty_(isatty(fileno(o.out)) != 0),
        start_(clock::now()),
        last_(start_) {}

  // Reports `done` of total, with an optional status text (e.g. "loss 1.93").
  // Ensures: output at most every min_interval_s (tty) or log_interval_s (not a tty), and always
  // at done == total.
  void update(long long done, const std::string& text = {}) {
    auto now = clock::now();
    double since = seconds(last_, now);
    bool final = done >= total_;
    if (!final && since < (tty_ ? o_.min_interval_s : o_.log_interval_s)) return;
    last_ = now;
    double el = seconds(start_, now);
    double frac = static_cast<double>(done) / static_cast<double>(total_);
    double eta = done > 0 ? el * (1.0 - frac) / frac : 0.0;
    int fill = static_cast<int>(frac * o_.bar_width + 0.5);
    std::string bar(static_cast<std::size_t>(fill), '#');
    bar.resize(static_cast<std::size_t>(o_.bar_width), '.');
    std::fprintf(o_.out, "%s%s [%s] %lld/%lld %5.1f%% %s elapsed %s eta %s%s",
                 tty_ ? "\r\033[K" : "", label_.c_str(), bar.c_str(), done, total_, 100.0 * frac,
                 text.c_str(), hms(el).c_str(), hms(eta).c_str(), tty_ && !final ? "" : "\n");
    std::fflush(o_.out);
  }

  // update(done, "what value") with the value to 3 decimals, e.g. update(t, "loss", 1.93).
  void update(long long done, const std::string& what, double value) {
    char txt[64];
    std::snprintf(txt, sizeof txt, "%s %.3f", what.c_str(), value);
    update(done, txt);
  }

  // update(done, what, v̄), v̄ the moving average of the values passed here (v̄ ← 0.98·v̄ +
  // 0.02·value; the first value as is): a noisy per-step loss, readable.
  void update_smoothed(long long done, const std::string& what, double value) {
    smoothed_ = std::isnan(smoothed_) ? value : 0.98 * smoothed_ + 0.02 * value;
    update(done, what, smoothed_);
  }

  // Ends the line on a terminal (after an update that was not final).
  void finish() {
    if (tty_) std::fputc('\n', o_.out);
  }

  double elapsed_s() const { return seconds(start_, clock::now()); }

 private:
  using clock = std::chrono::steady_clock;
  static double seconds(clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }

  std::string label_;
  long long total_;
  options o_;
  double smoothed_ = NAN;
  bool tty_;
  clock::time_point start_, last_;
};

}  // namespace paco::io
