// A worker joins a DiPaCo run from nothing (job/worker_role.hpp): worker 4's machine is lost
// mid-run (SIGKILL) and the run goes on without it; a new worker 4 started on an empty run
// directory (a new machine) receives the run's routing and where each module stands from the store
// (store::client::describe), starts at the store's round with fresh inner optimizer state, and its
// first push is accepted: its log records rounds from the one it joined to the last, with no push
// dropped, and the store closed its modules' rounds with its pushes in. A second store of the
// live run is refused (its lock), and a worker refuses a store of another run on its ports.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "support/processes.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using paco::testing::slurp;

TEST_CASE("a worker started mid-run on an empty directory joins from the store",
          "[multiproc][join]") {
  const fs::path dir = fs::temp_directory_path() / ("paco_join_" + std::to_string(::getpid()));
  const fs::path empty = dir.string() + "_new_machine";
  fs::remove_all(dir);
  fs::remove_all(empty);
  fs::create_directories(empty);
  // Fixed ports below the ephemeral range (a worker on a new machine knows no drawn port).
  const int base = paco::testing::free_port_block(8);
  REQUIRE(base > 0);
  const int rounds = 16;
  const auto job =
      paco::testing::small_dipaco_job(PACO_SOURCE_DIR, PACO_BINARY_DIR, dir, rounds, 20,
                                      {"--set", "launch.base_port=" + std::to_string(base), "--set",
                                       "launch.throttle=1:3,2:3,3:3,4:3"});
  ::setenv("PACO_TOKEN", "join-test-secret", 1);
  auto with = [&](std::vector<std::string> extra) {
    auto a = job;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // The run directory, as launch.mode = "manual" prepares it (base model, routing).
  {
    const pid_t p = paco::testing::spawn_logged(with({"--set", "launch.mode=manual"}),
                                                dir.string() + ".prepare.out");
    REQUIRE(paco::testing::exit_code(paco::testing::wait_exit(p, 120s)) == 0);
  }
  REQUIRE(fs::exists(dir / "routing.json"));
  const pid_t store = paco::testing::spawn_logged(
      with({"--role", "store", "--run-dir", dir.string()}), dir.string() + ".store.out");
  std::vector<pid_t> workers;
  for (int w = 1; w <= 4; ++w)
    workers.push_back(
        paco::testing::spawn_logged(with({"--role", "worker", "--worker", std::to_string(w),
                                          "--resume", "--run-dir", dir.string()}),
                                    dir.string() + ".worker" + std::to_string(w) + ".out"));
  // Worker 4's machine is lost after it completed a round; the others go on for two rounds.
  REQUIRE(paco::testing::wait_until(
      [&] { return !paco::testing::worker_log_values(dir, 4, "round").empty(); }, 120s));
  // A stray store of the live run (--resume, which passes the checkpoint checks) is refused: it
  // used to bind the ports the workers reconnect to and take the run over.
  {
    const fs::path stray_out = dir.string() + ".stray.out";
    const pid_t stray = paco::testing::spawn_logged(
        with({"--role", "store", "--resume", "--run-dir", dir.string()}), stray_out);
    const int code = paco::testing::exit_code(paco::testing::wait_exit(stray, 120s));
    INFO(slurp(stray_out));
    REQUIRE(code == 2);
    REQUIRE(slurp(stray_out).find("is in use by another") != std::string::npos);
    fs::remove(stray_out);
  }
  ::kill(workers[3], SIGKILL);
  paco::testing::wait_exit(workers[3], 10s);
  const auto lost_at = paco::testing::worker_log_values(dir, 4, "round").back();
  const std::size_t seen = paco::testing::worker_log_values(dir, 1, "round").size();
  REQUIRE(paco::testing::wait_until(
      [&] { return paco::testing::worker_log_values(dir, 1, "round").size() >= seen + 2; }, 120s));
  // A new worker 4, on a directory with nothing in it.
  const fs::path joiner_out = dir.string() + ".worker4.out";
  const pid_t joiner = paco::testing::spawn_logged(
      with({"--role", "worker", "--worker", "4", "--resume", "--run-dir", empty.string()}),
      joiner_out);
  const int joined = paco::testing::exit_code(paco::testing::wait_exit(joiner, 300s));
  INFO(slurp(joiner_out));
  REQUIRE(joined == 0);
  for (int w = 1; w <= 3; ++w) {  // (worker 4's first process was killed)
    INFO("worker " << w << ": " << slurp(dir.string() + ".worker" + std::to_string(w) + ".out"));
    REQUIRE(paco::testing::exit_code(paco::testing::wait_exit(workers[std::size_t(w - 1)], 300s)) ==
            0);
  }
  INFO(slurp(dir.string() + ".store.out"));
  REQUIRE(paco::testing::exit_code(paco::testing::wait_exit(store, 120s)) == 0);

  // It received the run's routing from the store: the same file, checksum and all.
  REQUIRE(slurp(empty / "routing.json") == slurp(dir / "routing.json"));
  const std::string said = slurp(joiner_out);
  REQUIRE(said.find("this directory held nothing of the run (a first start here)") !=
          std::string::npos);
  // It trained from the round it joined at to the last, every push accepted (none dropped late).
  const auto got = paco::testing::worker_log_values(empty, 4, "round");
  REQUIRE(!got.empty());
  REQUIRE(got.front() > lost_at + 1);  // it joined where the run was, not where it was lost
  REQUIRE(got.back() == rounds - 1);
  for (std::size_t i = 1; i < got.size(); ++i) REQUIRE(got[i] == got[i - 1] + 1);
  for (double late : paco::testing::worker_log_values(empty, 4, "late")) REQUIRE(late == 0);
  // Its steps were on the run's schedule (the store's round when it asked × H), not from 0.
  const auto steps = paco::testing::worker_log_values(empty, 4, "step");
  REQUIRE(steps.front() > 30);
  REQUIRE(steps.front() <= (got.front() + 1) * 30);
  // The store closed the rounds it joined with its pushes in: grid 2x2, worker 4's path (1,1)
  // takes modules 1 (level 0, expert 1) and 3 (level 1, expert 1), each shared with one other
  // worker, so their rounds close with 2/2 pushes.
  const std::string store_out = slurp(dir.string() + ".store.out");
  for (int m : {1, 3})
    REQUIRE(store_out.find("module " + std::to_string(m) + " round " + std::to_string(rounds - 1) +
                           " closed with 2/2 pushes") != std::string::npos);
  REQUIRE(store_out.find("refused") == std::string::npos);
  // The run's table from its directory: the bytes its logs hold and what fp32 pushes of the same
  // rounds would send, which in an fp32 run is the same (it said 4x more when worker 4's first
  // life, 1 to 3 rounds, was weighed against fp32 pushes of all 16); and it says how many rounds
  // the logs here cover (worker 4's later rounds were logged on the other machine).
  {
    const fs::path table_out = dir.string() + ".results.out";
    const pid_t p =
        paco::testing::spawn_logged(with({"--run-dir", dir.string(), "--results"}), table_out);
    const int code = paco::testing::exit_code(paco::testing::wait_exit(p, 300s));
    const std::string table = slurp(table_out);
    INFO(table);
    REQUIRE(code == 0);
    REQUIRE(table.find("fp32 pushes would send") != std::string::npos);
    REQUIRE(table.find("(1.00x more)") != std::string::npos);
    REQUIRE(table.find("the logs here cover " + std::to_string(3 * rounds + long(lost_at) + 1) +
                       " of the " + std::to_string(4 * rounds) + " process-rounds") !=
            std::string::npos);
    fs::remove(table_out);
  }
  fs::remove_all(dir);
  fs::remove_all(empty);
}

TEST_CASE("a worker refuses a store of another run listening on its run's ports",
          "[multiproc][join]") {
  // Runs A and B of the same configuration on the same fixed ports (launch.mode = "manual"
  // prepares each): B's store is up, and A's worker must not train against it.
  const auto tmp = fs::temp_directory_path();
  const std::string id = std::to_string(::getpid());
  const fs::path a = tmp / ("paco_ident_a_" + id), b = tmp / ("paco_ident_b_" + id);
  const int base = paco::testing::free_port_block(8);
  REQUIRE(base > 0);
  ::setenv("PACO_TOKEN", "identity-test-secret", 1);
  const auto job = [&](const fs::path& dir, std::vector<std::string> extra) {
    auto args = paco::testing::small_dipaco_job(
        PACO_SOURCE_DIR, PACO_BINARY_DIR, dir, 4, 20,
        {"--set", "launch.base_port=" + std::to_string(base), "--set", "launch.mode=manual"});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  for (const auto& dir : {a, b}) {
    fs::remove_all(dir);
    const pid_t p = paco::testing::spawn_logged(job(dir, {}), dir.string() + ".prepare.out");
    REQUIRE(paco::testing::exit_code(paco::testing::wait_exit(p, 120s)) == 0);
  }
  REQUIRE(slurp(a / "routing.json") != slurp(b / "routing.json"));  // two runs, two run ids
  const pid_t store = paco::testing::spawn_logged(
      job(b, {"--role", "store", "--run-dir", b.string()}), b.string() + ".store.out");
  const fs::path out = a.string() + ".worker1.out";
  const pid_t worker = paco::testing::spawn_logged(
      job(a, {"--role", "worker", "--worker", "1", "--resume", "--run-dir", a.string()}), out);
  const int code = paco::testing::exit_code(paco::testing::wait_exit(worker, 120s));
  ::kill(store, SIGTERM);
  paco::testing::wait_exit(store, 30s);
  INFO(slurp(out));
  REQUIRE(code == 2);
  REQUIRE(slurp(out).find("(another run's store on this run's ports?)") != std::string::npos);
  REQUIRE(paco::testing::worker_log_values(a, 1, "round").empty());  // it trained nothing
  for (const auto& dir : {a, b}) {
    fs::remove_all(dir);
    for (const std::string f : {".prepare.out", ".store.out", ".worker1.out"})
      fs::remove(dir.string() + f);
  }
}
