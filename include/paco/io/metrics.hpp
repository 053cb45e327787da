#pragma once
// metrics_log: one JSON object per line (JSONL), flushed per record, for plotting and tooling.
// A record that cannot be written whole (a full disk, a read-only directory) is an error naming
// the file: a run's log is part of its result, so callers treat it like a failed checkpoint.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"

namespace paco::io {

class metrics_log {
 public:
  metrics_log() = default;
  // Opens path for appending (or truncating). Errors: io.
  static result<metrics_log> open(const std::filesystem::path& path, bool append = false) {
    std::error_code ec;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    metrics_log m;
    m.f_ = std::fopen(path.c_str(), append ? "a" : "w");
    if (!m.f_)
      return error(errc::io,
                   "cannot open metrics file '" + path.string() + "': " + std::strerror(errno));
    m.path_ = path;
    return m;
  }
  metrics_log(metrics_log&& o) noexcept
      : f_(std::exchange(o.f_, nullptr)), path_(std::move(o.path_)) {}
  metrics_log& operator=(metrics_log&& o) noexcept {
    std::swap(f_, o.f_);
    std::swap(path_, o.path_);
    return *this;
  }
  ~metrics_log() {
    if (f_) std::fclose(f_);
  }
  // Appends one record and flushes it. No-op on a default-constructed log.
  // Errors: io naming the file when the record could not be written and flushed whole (the
  // file may then end in a partial line, which readers of the log skip).
  status write(const nlohmann::json& record) {
    if (!f_) return {};
    std::string s = record.dump();
    s += '\n';
    errno = 0;
    if (std::fwrite(s.data(), 1, s.size(), f_) != s.size() || std::fflush(f_) != 0) {
      const int err = errno;
      std::clearerr(f_);
      return {errc::io, "cannot write metrics file '" + path_.string() +
                            "': " + (err ? std::strerror(err) : "short write")};
    }
    return {};
  }

 private:
  std::FILE* f_ = nullptr;
  std::filesystem::path path_;
};

}  // namespace paco::io
