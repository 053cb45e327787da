#pragma once
// run_lock: one live holder of a role in a run directory (flock on a file holding its pid).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>

#include "paco/core/error.hpp"

namespace paco::job {

namespace fs = std::filesystem;

// A lock in a run directory: flock on dir/<name>, which holds the holder's pid. Released when
// its process exits (however it exits: the kernel drops the lock with the descriptor), so a
// process restarted after a crash takes it again, and a second live holder is refused.
//   run.lock    the launcher's (or the store rank's under mpirun): one launch per run directory
//   store.lock  the store role's: one live store per run (a stray `--role store --resume`
//               beside a live run would bind the ports its workers reconnect to)
class run_lock {
 public:
  // holder: what holds it, for the message ("launcher", "store"). Errors: io naming the pid of
  // the process that holds it; io if the directory cannot be created or written (checked here,
  // before anything is trained).
  static result<run_lock> acquire(const fs::path& dir, const std::string& program = "paco",
                                  const std::string& name = "run.lock",
                                  const std::string& holder = "launcher") {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      return error(errc::io,
                   "cannot create the run directory '" + dir.string() + "': " + ec.message());
    const fs::path file = dir / name;
    const int fd = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return error(errc::io, "cannot write in the run directory '" + dir.string() +
                                 "': " + std::strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      char b[32] = {};
      ssize_t n = 0;
      for (int i = 0; i < 50 && n <= 0; ++i) {  // the holder may not have written its pid yet
        if (i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        n = pread(fd, b, sizeof b - 1, 0);
      }
      close(fd);
      std::string who = n > 0 ? std::string(b, std::size_t(n)) : "unknown";
      while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
      return error(errc::io, "the run directory '" + dir.string() + "' is in use by another " +
                                 program + " " + holder + " (pid " + who + ", lock " +
                                 file.string() + ")");
    }
    const std::string pid = std::to_string(getpid()) + "\n";
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size()) ||
        fsync(fd) != 0) {
      const std::string why = std::strerror(errno);
      close(fd);
      return error(errc::io, "cannot write in the run directory '" + dir.string() + "': " + why);
    }
    return run_lock(fd);
  }
  run_lock(run_lock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  run_lock& operator=(run_lock&&) = delete;
  ~run_lock() {
    if (fd_ >= 0) close(fd_);
  }

 private:
  explicit run_lock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace paco::job
