#pragma once
// timestamp_lines: every line a stdio stream writes, prefixed with the UTC wall-clock time to the
// millisecond in ISO 8601 ("2026-12-03T15:58:56.123Z "), so that the logs of a run's processes,
// on one machine or several, read side by side. The job layer wraps a role process's stdout and
// stderr when they go to a log file (job/main.hpp run_role).
//
//   io::timestamp_lines(stdout);   // stdout now stamps each line it writes
//
// glibc's fopencookie: the wrapping stream is line-buffered and writes through to the original
// stream, which stays open. A line written in several pieces gets one stamp, at its start.
// Thread-safe as stdio is: each stream's lock serialises its writers.

#include <sys/types.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace paco::io {

namespace detail {

struct line_stamper {
  FILE* to = nullptr;
  bool at_line_start = true;
};

// "YYYY-MM-DDTHH:MM:SS.mmmZ " of now.
inline void utc_stamp(char (&out)[32]) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t s = std::chrono::system_clock::to_time_t(now);
  const long ms = long(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char day[24];
  std::strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(out, sizeof out, "%s.%03ldZ ", day, ms);
}

inline ssize_t stamp_write(void* cookie, const char* buf, std::size_t n) {
  auto* st = static_cast<line_stamper*>(cookie);
  std::size_t i = 0;
  while (i < n) {
    if (st->at_line_start) {
      char t[32];
      utc_stamp(t);
      if (std::fputs(t, st->to) == EOF) return -1;
      st->at_line_start = false;
    }
    const void* nl = std::memchr(buf + i, '\n', n - i);
    const std::size_t end = nl ? std::size_t(static_cast<const char*>(nl) - buf) + 1 : n;
    if (std::fwrite(buf + i, 1, end - i, st->to) != end - i) return i ? ssize_t(i) : -1;
    if (nl) st->at_line_start = true;
    i = end;
  }
  return std::fflush(st->to) == 0 ? ssize_t(n) : -1;
}

// Closing the wrapping stream frees its cookie and leaves the original stream open.
inline int stamp_close(void* cookie) {
  delete static_cast<line_stamper*>(cookie);
  return 0;
}

}  // namespace detail

// Replaces `stream` (stdout or stderr: glibc's are assignable variables) by a line-buffered
// stream that writes each line to the original, prefixed with the time. Returns false, leaving
// `stream` as it was, if glibc cannot open one. Ensures: the original stream stays open and
// receives every byte, in order; fclose of the new stream flushes it and leaves the original open.
inline bool timestamp_lines(FILE*& stream) {
  std::fflush(stream);
  auto* st = new detail::line_stamper{stream};  // the cookie: owned by the stream from here
  const cookie_io_functions_t io{nullptr, detail::stamp_write, nullptr, detail::stamp_close};
  FILE* f = fopencookie(st, "w", io);
  if (!f) {
    delete st;
    return false;
  }
  std::setvbuf(f, nullptr, _IOLBF, 0);
  stream = f;
  return true;
}

}  // namespace paco::io
