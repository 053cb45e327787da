#pragma once
// metrics_log: one JSON object per line (JSONL), written whole per record, for plotting and
// tooling. A record that cannot be written whole (a full disk, a read-only directory) is an
// error naming the file, and the part of it that did reach the file is cut off again: the log
// holds whole records only, so a retried write never glues onto the tail of a failed one. A
// run's log is part of its result, so callers treat a failed write like a failed checkpoint.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/json_read.hpp"

namespace paco::io {

class metrics_log {
 public:
  metrics_log() = default;
  // Opens path for appending (or truncating). Errors: io naming the file.
  static result<metrics_log> open(const std::filesystem::path& path, bool append = false) {
    std::error_code ec;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    metrics_log m;
    m.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_APPEND | (append ? 0 : O_TRUNC),
                   0644);
    if (m.fd_ < 0)
      return error(errc::io,
                   "cannot open metrics file '" + path.string() + "': " + std::strerror(errno));
    m.path_ = path;
    return m;
  }
  metrics_log(metrics_log&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}
  metrics_log& operator=(metrics_log&& o) noexcept {
    std::swap(fd_, o.fd_);
    std::swap(path_, o.path_);
    return *this;
  }
  ~metrics_log() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Appends one record as one line. No-op on a default-constructed log.
  // Ensures: the file ends with the whole record, or (on error) as it was before the call.
  // Errors: io naming the file.
  status write(const nlohmann::json& record) {
    if (fd_ < 0) return {};
    std::string s = record.dump();
    s += '\n';
    const off_t before = ::lseek(fd_, 0, SEEK_END);
    const char* c = s.data();
    std::size_t n = s.size();
    while (n > 0) {
      const ssize_t k = ::write(fd_, c, n);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        const int err = k < 0 ? errno : ENOSPC;
        // Cut the part that was written; should that fail too, readers skip the line that
        // does not parse.
        if (before >= 0) static_cast<void>(::ftruncate(fd_, before) == 0);
        return {errc::io,
                "cannot write metrics file '" + path_.string() + "': " + std::strerror(err)};
      }
      c += k;
      n -= std::size_t(k);
    }
    return {};
  }

 private:
  int fd_ = -1;
  std::filesystem::path path_;
};

// Rewrites the log at `path` with only the records `keep` accepts, in order (a process that
// resumes from an earlier point than its log reached drops the records it will write again). A
// line that does not parse (the tail of a write cut short) is dropped; a missing file is left
// missing. Ensures: the file is the old one or the new one, never partial. Errors: io naming it.
inline status keep_records(const std::filesystem::path& path,
                           const std::function<bool(const nlohmann::json&)>& keep) {
  std::ifstream in(path);
  if (!in) return {};
  std::string kept, line;
  while (std::getline(in, line)) {
    const auto j = json_parse(line, path.string());
    if (j && keep(*j)) kept += line + "\n";
  }
  return write_file_atomic(path, kept);
}

}  // namespace paco::io
