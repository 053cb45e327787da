#pragma once
// write_file_atomic: a file is either the old version or the complete new one, never a torn
// mix: write to a temporary file in the same directory, fsync it, rename over the target,
// fsync the directory. A crash at any point leaves the previous file intact.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "paco/core/error.hpp"

namespace paco::io {

// Calls write(fd-backed appender) to produce the content, then publishes it atomically.
// The appender returns false on a short write. Ensures: on error the target is unchanged.
inline status write_file_atomic(
    const std::filesystem::path& target,
    const std::function<bool(const std::function<bool(const void*, std::size_t)>&)>& write) {
  namespace fs = std::filesystem;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::string name = ".";  // appended, not operator+: g++ 12 warns falsely on "." + string&&
  name += target.filename().string();
  name += ".tmp.";
  name += std::to_string(::getpid());
  const std::string tmp = (dir / name).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return {errc::io, "cannot create '" + tmp + "': " + std::strerror(errno)};
  auto append = [fd](const void* p, std::size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t k = ::write(fd, c, n);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      c += k;
      n -= std::size_t(k);
    }
    return true;
  };
  bool ok = write(append);
  int err = errno;
  if (ok && ::fsync(fd) != 0) ok = false, err = errno;
  if (::close(fd) != 0 && ok) ok = false, err = errno;
  if (!ok) {
    ::unlink(tmp.c_str());
    return {errc::io, "writing '" + target.string() + "' failed: " + std::strerror(err)};
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return {errc::io, "cannot rename onto '" + target.string() + "': " + std::strerror(err)};
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

// Calls write() up to `tries` times, sleeping `pause` (doubled after each failure) between
// tries, for writes whose failure may pass (a disk that fills and frees, an NFS hiccup).
// Ensures: the first ok, or the last error with the number of tries in its message.
inline status with_retries(const std::function<status()>& write, int tries = 3,
                           std::chrono::milliseconds pause = std::chrono::milliseconds(200)) {
  status s;
  for (int i = 0; i < std::max(1, tries); ++i) {
    if (i) std::this_thread::sleep_for(pause * (1 << std::min(i - 1, 10)));
    s = write();
    if (s) return s;
  }
  return paco::error(s.error().code, s.error().message + " (" + std::to_string(std::max(1, tries)) +
                                         (tries > 1 ? " tries)" : " try)"));
}

inline status write_file_atomic(const std::filesystem::path& target, std::string_view content) {
  return write_file_atomic(
      target, [&](const auto& append) { return append(content.data(), content.size()); });
}

}  // namespace paco::io
