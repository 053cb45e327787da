// The launcher of the multi-process DiPaCo job (examples/paco_train) keeps runs apart and leaves
// nothing behind: a run directory with a previous run is neither overwritten without --fresh
// nor resumed from missing or damaged checkpoints; a second launcher on a live run is refused,
// naming the holder's pid; killing the launcher (kill -9 or SIGTERM) leaves no process of the
// run; a store without PACO_TOKEN refuses to start instead of serving nothing; a port in use
// fails the launch at once, naming it.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "support/processes.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using paco::testing::find_processes;
using paco::testing::slurp;

namespace {

struct small_run : paco::testing::small_dipaco_run {
  explicit small_run(fs::path d)
      : small_dipaco_run{PACO_SOURCE_DIR, PACO_BINARY_DIR, std::move(d)} {}
};

}  // namespace

TEST_CASE("the DiPaCo launcher neither wipes nor resumes a run silently", "[multiproc][launch]") {
  small_run r{fs::temp_directory_path() / ("paco_launch_" + std::to_string(::getpid()))};
  fs::remove_all(r.dir);
  auto [code, out] = r.run();
  INFO(out);
  REQUIRE(code == 0);

  // The same command again: refused, the previous run is left as it was.
  const auto store_before = slurp(r.dir / "store.safetensors");
  std::tie(code, out) = r.run();
  REQUIRE(code == 2);
  REQUIRE(out.find("holds a previous run") != std::string::npos);
  REQUIRE(slurp(r.dir / "store.safetensors") == store_before);

  // A store without PACO_TOKEN refuses at once (it used to print "serving" and spin).
  std::tie(code, out) = r.run({"--role", "store", "--resume"}, {"PACO_TOKEN"});
  REQUIRE(code == 2);
  REQUIRE(out.find("PACO_TOKEN is not set") != std::string::npos);

  // --resume with the store checkpoint missing, or a worker checkpoint truncated: an error
  // naming the file.
  fs::rename(r.dir / "store.safetensors", r.dir / "store.keep");
  std::tie(code, out) = r.run({"--resume"});
  REQUIRE(code == 2);
  REQUIRE(out.find("store.safetensors' is missing") != std::string::npos);
  fs::rename(r.dir / "store.keep", r.dir / "store.safetensors");
  const fs::path w2 = r.dir / "worker-2.safetensors";
  fs::copy_file(w2, r.dir / "w2.keep");
  fs::resize_file(w2, fs::file_size(w2) / 2);
  std::tie(code, out) = r.run({"--resume"});
  REQUIRE(code == 2);
  REQUIRE(out.find("worker-2.safetensors") != std::string::npos);
  fs::remove(w2);
  fs::rename(r.dir / "w2.keep", w2);
  // Intact checkpoints resume (the run is complete: nothing left to train).
  std::tie(code, out) = r.run({"--resume"});
  REQUIRE(code == 0);
  REQUIRE(slurp(r.dir / "store.safetensors") == store_before);
  fs::remove_all(r.dir);
  fs::remove(r.dir.string() + ".out");
}

TEST_CASE("the DiPaCo launcher locks its run and leaves no process behind", "[multiproc][launch]") {
  small_run r{fs::temp_directory_path() / ("paco_lock_" + std::to_string(::getpid()))};
  r.rounds = 400;  // long enough to be killed while running
  fs::remove_all(r.dir);
  for (int sig : {SIGKILL, SIGTERM}) {
    INFO("signal " << sig);
    fs::remove_all(r.dir);
    const fs::path out = r.dir.string() + ".launcher";
    const pid_t launcher = paco::testing::spawn_logged(r.args({"--fresh"}), out);
    REQUIRE(launcher > 0);
    struct reap_at_exit {  // a failed REQUIRE must not leave the run going
      pid_t pid;
      ~reap_at_exit() {
        if (pid > 0 && ::kill(pid, SIGKILL) == 0) waitpid(pid, nullptr, 0);
      }
    } reaper{launcher};
    REQUIRE(paco::testing::wait_until([&] { return fs::exists(r.dir / "worker-1.jsonl"); }, 120s));
    // A second launcher on the live run is refused, naming the holder.
    auto [code, text] = r.run({"--resume"});
    INFO(text);
    REQUIRE(code == 2);
    REQUIRE(text.find("in use by another paco_train launcher (pid " + std::to_string(launcher)) !=
            std::string::npos);
    REQUIRE(find_processes({"--role", r.dir.string()}).size() == 5);  // store + 4 workers
    REQUIRE(::kill(launcher, sig) == 0);
    const int st = paco::testing::wait_exit(launcher, 30s);
    reaper.pid = -1;  // reaped: its pid is no longer ours
    REQUIRE(st != -1);
    // Every child dies with the launcher (parent-death signal, or forwarded SIGTERM).
    REQUIRE(paco::testing::wait_until(
        [&] {
          return find_processes({"--role", r.dir.string()}).empty();
        },
        10s));
    if (sig == SIGTERM) {
      REQUIRE(WIFEXITED(st));
      REQUIRE(WEXITSTATUS(st) == 128 + SIGTERM);
    }
  }
  fs::remove_all(r.dir);
  fs::remove(r.dir.string() + ".launcher");
  fs::remove(r.dir.string() + ".out");
}

TEST_CASE("a worker restarted without a checkpoint after the store finished the run ends at once",
          "[multiproc][launch]") {
  // A worker killed before its first checkpoint and restarted while the others closed the last
  // rounds without it: the store is done and gone. The worker reads the store's checkpoint and
  // ends, instead of trying to connect for a minute (the launcher had failed such a run).
  small_run r{fs::temp_directory_path() / ("paco_finished_" + std::to_string(::getpid()))};
  fs::remove_all(r.dir);
  auto [code, out] = r.run();
  INFO(out);
  REQUIRE(code == 0);
  REQUIRE(fs::remove(r.dir / "worker-1.safetensors"));
  REQUIRE(fs::remove(r.dir / "worker-1.jsonl"));
  ::setenv("PACO_TOKEN", "a-token-it-never-sends", 1);  // a worker started by hand needs one
  std::tie(code, out) = r.run({"--role", "worker", "--worker", "1", "--resume"});
  ::unsetenv("PACO_TOKEN");
  INFO(out);
  REQUIRE(code == 0);
  REQUIRE(out.find("worker 1: the store's checkpoint holds path 0 at the last round") !=
          std::string::npos);
  fs::remove_all(r.dir);
}

TEST_CASE("paco_train --resume without a checkpoint is an error", "[multiproc][launch]") {
  const fs::path dir = fs::temp_directory_path() / ("paco_lm_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path out = dir.string() + ".out";
  const pid_t pid = paco::testing::spawn_logged(
      {(fs::path(PACO_BINARY_DIR) / "examples" / "paco_train" / "paco_train").string(), "-c",
       (fs::path(PACO_SOURCE_DIR) / "examples" / "configs" / "lm_brown.toml").string(), "--set",
       "output.dir=" + dir.string(), "--set", "model.d=32", "--set", "model.layers=1", "--set",
       "model.heads=2", "--resume"},
      out);
  const int st = paco::testing::wait_exit(pid, 60s);
  const std::string text = slurp(out);
  INFO(text);
  REQUIRE(st != -1);
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 2);
  REQUIRE(text.find("no checkpoint") != std::string::npos);
  fs::remove_all(dir);
  fs::remove(out);
}

namespace {
// A TCP listener on 127.0.0.1 held for the scope (a port another process holds). port: its port.
struct held_port {
  int fd = -1, port = 0;
  held_port() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 1) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
  }
  ~held_port() { ::close(fd); }
};
}  // namespace

TEST_CASE("a port in use fails the launch at once, naming the port and its setting",
          "[multiproc][launch]") {
  // Before: the store printed "serving" and waited while the worker failed 62 s later with a
  // handshake deadline; a metrics port in use failed only after pretraining, blamed on "bad
  // input". Now every port is checked before the data or the base model, within 5 s.
  small_run r{fs::temp_directory_path() / ("paco_ports_" + std::to_string(::getpid()))};
  held_port held;
  REQUIRE(held.port > 0);
  auto within = [&](const std::vector<std::string>& extra) {
    fs::remove_all(r.dir);
    const auto t0 = std::chrono::steady_clock::now();
    auto [code, out] = r.run(extra, {}, std::chrono::milliseconds(60000));
    return std::tuple{code, out, std::chrono::steady_clock::now() - t0};
  };
  {  // the store's link to worker 2 (launch.base_port + 2)
    auto [code, out, took] = within({"--set", "launch.base_port=" + std::to_string(held.port - 2)});
    INFO(out);
    CHECK(code == 2);
    CHECK(took < 5s);
    CHECK_THAT(out, Catch::Contains("port " + std::to_string(held.port) +
                                    " (the store's link to worker-2, launch.base_port)"));
    CHECK_THAT(out, Catch::Contains("in use"));
  }
  {  // worker 3's metrics (launch.metrics_port + 3)
    auto [code, out, took] =
        within({"--set", "launch.metrics_port=" + std::to_string(held.port - 3)});
    INFO(out);
    CHECK(code == 2);
    CHECK(took < 5s);
    CHECK_THAT(out, Catch::Contains("port " + std::to_string(held.port) +
                                    " (worker-3's metrics, launch.metrics_port)"));
  }
  {  // a store started by hand on a prepared run whose link port is taken: it refuses at once
    const std::vector<std::string> sets{"--set",
                                        "launch.base_port=" + std::to_string(held.port - 1)};
    fs::remove_all(r.dir);
    std::vector<std::string> prep = sets;
    prep.insert(prep.end(), {"--role", "prepare"});
    REQUIRE(r.run(prep).first == 0);
    std::vector<std::string> store = sets;
    store.insert(store.end(), {"--role", "store"});
    ::setenv("PACO_TOKEN", "ports-test", 1);
    const auto t0 = std::chrono::steady_clock::now();
    auto [code, out] = r.run(store, {}, std::chrono::milliseconds(60000));
    INFO(out);
    CHECK(code == 2);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    CHECK_THAT(out, Catch::Contains("store: port " + std::to_string(held.port) +
                                    " (the link to worker-1"));
  }
  fs::remove_all(r.dir);
}
