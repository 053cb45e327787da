// A broken DiPaCo run never ends in exit 0 with a stale or partial result, and never hangs: a
// run directory that fills up or turns read-only mid-run, a stray store or worker role on a run
// it did not start, a store checkpoint behind its workers, a worker checkpoint deleted, swapped
// or from another run, an edited routing.json, a store that stops answering. Each case failed
// silently (exit 0, wrong table) or hung before the checks it exercises.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/hash.hpp"
#include "paco/job/results.hpp"
#include "paco/path/path_plan.hpp"
#include "support/processes.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using paco::testing::slurp;
using paco::testing::small_dipaco_run;

namespace {

small_dipaco_run make_run(const std::string& name, int rounds) {
  small_dipaco_run r{PACO_SOURCE_DIR, PACO_BINARY_DIR,
                     fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))};
  r.rounds = rounds;
  return r;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Fills the file system holding dir: writes until the disk is full. Returns the filler's path.
fs::path fill_disk(const fs::path& dir) {
  const fs::path filler = dir / "filler";
  std::ofstream f(filler, std::ios::binary);
  const std::vector<char> block(1 << 16, 'x');
  while (f.write(block.data(), std::streamsize(block.size())) && f.flush()) {
  }
  return filler;
}

// A tmpfs of `size` mounted on dir (created) for the test's scope, then unmounted and removed
// with dir.out; mounted() is false (a warning said why) where mounting is not permitted.
struct tmpfs_dir {
  fs::path dir;
  bool ok = false;
  tmpfs_dir(fs::path d, const char* size) : dir(std::move(d)) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    ok = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, size) == 0;
    if (!ok) WARN("skipped: cannot mount a tmpfs here (" << std::strerror(errno) << ")");
  }
  tmpfs_dir(const tmpfs_dir&) = delete;
  tmpfs_dir& operator=(const tmpfs_dir&) = delete;
  ~tmpfs_dir() {
    if (ok) ::umount2(dir.c_str(), MNT_DETACH);
    fs::remove_all(dir);
    fs::remove(dir.string() + ".out");
  }
  bool mounted() const { return ok; }
};

// Rewrites routing.json with `edit` applied and a valid checksum (what a tool that knows the
// format could do): hash64 of the JSON without its "checksum" key, as 16 hex digits.
void rewrite_routing(const fs::path& file, const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(slurp(file));
  edit(j);
  j.erase("checksum");
  const std::string text = j.dump();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                (unsigned long long)paco::hash64(text.data(), text.size()));
  j["checksum"] = hex;
  std::ofstream(file) << j.dump();
}

}  // namespace

TEST_CASE("loss curves on a full disk say they were not written", "[multiproc][broken]") {
  // The disk filled after the last round: the run is whole (its table stands), but the curves
  // used to be empty files announced as "loss curves: …png".
  const fs::path dir = fs::temp_directory_path() / ("paco_curves_" + std::to_string(::getpid()));
  const tmpfs_dir tmpfs(dir, "size=1m");
  if (!tmpfs.mounted()) return;
  const auto plan = paco::path::path_plan::make(paco::path::module_grid<2>::experts({2, 2}),
                                                {{0, 4, {"a"}}, {4, 4, {"b"}}});
  REQUIRE(plan);
  const paco::job::run_dir rd{dir};
  const paco::job::job_processes jp{.workers = plan->workers(), .K = 1};
  for (int w = 1; w <= plan->workers(); ++w) {
    std::ofstream log(rd.worker_log(w));
    for (int r = 0; r < 3; ++r)
      log << nlohmann::json{{"round", r}, {"step", 30 * (r + 1)}, {"bpb", 3.0 - r}}.dump() << "\n";
  }
  // With room, the data is written (and drawn where gnuplot is installed).
  const std::string room = paco::job::plot_curves(rd, *plan, jp);
  INFO(room);
  REQUIRE(!has(room, "not written"));
  REQUIRE(fs::file_size(dir / "loss_curves.dat") > 0);
  fs::remove(dir / "loss_curves.dat");
  fs::remove(dir / "loss_curves.png");
  fill_disk(dir);
  const std::string full = paco::job::plot_curves(rd, *plan, jp);
  INFO(full);
  REQUIRE(has(full, "not written ("));
  REQUIRE(!has(full, ".png"));
}

TEST_CASE("a run directory that fills up mid-run ends in a failure, then resumes whole",
          "[multiproc][broken]") {
  auto r = make_run("paco_full", 30);
  const tmpfs_dir tmpfs(r.dir, "size=16m");
  if (!tmpfs.mounted()) return;
  const pid_t launcher = r.start();
  REQUIRE(launcher > 0);
  REQUIRE(paco::testing::wait_until([&] { return fs::exists(r.dir / "worker-1.jsonl"); }, 120s));
  const fs::path filler = fill_disk(r.dir);
  const int code = paco::testing::exit_code(paco::testing::wait_exit(launcher, 180s));
  std::string out = slurp(r.out());
  INFO(out);
  REQUIRE(code != 0);
  REQUIRE(code != -1);  // it ended by itself
  REQUIRE(has(out, "could not write its checkpoint or log"));
  REQUIRE(!has(out, "all (routed)"));  // no results table from a partial run
  // Space again: the same run resumes from its checkpoints and finishes whole.
  fs::remove(filler);
  int again = 0;
  std::tie(again, out) = r.run({"--resume"});
  INFO(out);
  REQUIRE(again == 0);
  REQUIRE(has(out, "all (routed)"));
}

TEST_CASE("a run directory made read-only mid-run ends in a failure, then resumes whole",
          "[multiproc][broken]") {
  auto r = make_run("paco_ro", 30);
  fs::remove_all(r.dir);
  fs::create_directories(r.dir);
  const std::string probe = "chattr +i '" + r.dir.string() + "' 2>/dev/null && chattr -i '" +
                            r.dir.string() + "' 2>/dev/null";
  if (std::system(probe.c_str()) != 0) {
    WARN("skipped: chattr +i is not permitted on " << r.dir.parent_path());
    fs::remove_all(r.dir);
    return;
  }
  const std::string unlock = "chattr -i '" + r.dir.string() + "'";
  struct unlock_at_exit {
    std::string cmd;
    fs::path dir;
    ~unlock_at_exit() {
      if (std::system(cmd.c_str()) != 0) return;
      fs::remove_all(dir);
      fs::remove(dir.string() + ".out");
    }
  } cleanup{unlock, r.dir};
  fs::remove_all(r.dir);
  const pid_t launcher = r.start();
  REQUIRE(launcher > 0);
  REQUIRE(paco::testing::wait_until([&] { return fs::exists(r.dir / "worker-1.jsonl"); }, 120s));
  REQUIRE(std::system(("chattr +i '" + r.dir.string() + "'").c_str()) == 0);
  const int code = paco::testing::exit_code(paco::testing::wait_exit(launcher, 180s));
  std::string out = slurp(r.out());
  INFO(out);
  REQUIRE(code != 0);
  REQUIRE(code != -1);
  REQUIRE(has(out, "could not write its checkpoint or log"));
  REQUIRE(has(out, ".log ends:\n    "));  // the failed process's own words, quoted
  REQUIRE(!has(out, "all (routed)"));
  REQUIRE(std::system(unlock.c_str()) == 0);
  int again = 0;
  std::tie(again, out) = r.run({"--resume"});
  INFO(out);
  REQUIRE(again == 0);
  REQUIRE(has(out, "all (routed)"));
}

TEST_CASE(
    "no role overwrites a run it did not start; a foreign, swapped, missing or stale "
    "checkpoint is an error naming it",
    "[multiproc][broken]") {
  auto r = make_run("paco_stray", 4);
  fs::remove_all(r.dir);
  ::setenv("PACO_TOKEN", "broken-runs-test", 1);  // the roles run below need the group's secret
  // A copy of the store's checkpoint from early in the run: later it stands for a store
  // restored from an older backup.
  const pid_t launcher = r.start();
  REQUIRE(launcher > 0);
  REQUIRE(paco::testing::wait_until([&] { return fs::exists(r.dir / "worker-1.jsonl"); }, 120s));
  const fs::path early = r.dir.string() + ".early";
  fs::copy_file(r.dir / "store.safetensors", early, fs::copy_options::overwrite_existing);
  int code = paco::testing::exit_code(paco::testing::wait_exit(launcher, 180s));
  std::string out = slurp(r.out());
  INFO(out);
  REQUIRE(code == 0);
  const std::string store_done = slurp(r.dir / "store.safetensors");

  // A stray store role without --resume used to reset the finished run to the base model.
  std::tie(code, out) = r.run({"--role", "store"});
  INFO(out);
  REQUIRE(code == 2);
  REQUIRE(has(out, "holds a store checkpoint"));
  // --fresh for the store alone would put it behind its workers.
  std::tie(code, out) = r.run({"--role", "store", "--fresh"});
  REQUIRE(code == 2);
  REQUIRE(has(out, "behind worker"));
  REQUIRE(slurp(r.dir / "store.safetensors") == store_done);
  // So would a stray worker role restart its worker from nothing.
  std::tie(code, out) = r.run({"--role", "worker", "--worker", "2"});
  REQUIRE(code == 2);
  REQUIRE(has(out, "holds this worker's state"));

  // The store restored from the early copy: behind the workers' checkpoints (it used to hang,
  // closing empty rounds past the last).
  fs::copy_file(early, r.dir / "store.safetensors", fs::copy_options::overwrite_existing);
  std::tie(code, out) = r.run({"--resume"});
  REQUIRE(code == 2);
  REQUIRE(has(out, "older than the workers'"));
  std::ofstream(r.dir / "store.safetensors", std::ios::binary) << store_done;

  const fs::path w1 = r.dir / "worker-1.safetensors", w2 = r.dir / "worker-2.safetensors";
  const fs::path keep = r.dir.string() + ".w1";
  fs::copy_file(w1, keep, fs::copy_options::overwrite_existing);
  // Deleted: its log records rounds, so this is no fresh join.
  fs::remove(w1);
  std::tie(code, out) = r.run({"--resume"});
  REQUIRE(code == 2);
  REQUIRE(has(out, "worker-1.safetensors' is missing"));
  // Swapped with worker 2's.
  fs::copy_file(w2, w1);
  fs::copy_file(keep, w2, fs::copy_options::overwrite_existing);
  std::tie(code, out) = r.run({"--resume"});
  REQUIRE(code == 2);
  REQUIRE(has(out, "swapped"));
  fs::copy_file(w1, w2, fs::copy_options::overwrite_existing);
  fs::copy_file(keep, w1, fs::copy_options::overwrite_existing);
  // routing.json edited by hand: fails its checksum.
  const std::string routing = slurp(r.dir / "routing.json");
  {
    auto j = nlohmann::json::parse(routing);
    j["train_route"][0] = 1 - j["train_route"][0].get<int>();
    std::ofstream(r.dir / "routing.json") << j.dump();
  }
  std::tie(code, out) = r.run({"--resume"});
  REQUIRE(code == 2);
  REQUIRE(has(out, "fails its checksum"));
  // The checkpoints under another run's (valid) routing file: they belong to another run.
  std::ofstream(r.dir / "routing.json") << routing;
  rewrite_routing(r.dir / "routing.json", [](nlohmann::json& j) { j["run_id"] = "0123abcd"; });
  std::tie(code, out) = r.run({"--resume"});
  INFO(out);
  REQUIRE(code == 2);
  REQUIRE(has(out, "belongs to run"));
  std::ofstream(r.dir / "routing.json") << routing;
  // Everything back in place: the finished run resumes as complete.
  std::tie(code, out) = r.run({"--resume"});
  INFO(out);
  REQUIRE(code == 0);
  REQUIRE(slurp(r.dir / "store.safetensors") == store_done);

  // Manual mode prints commands that resume, so that running one again continues its process.
  auto m = make_run("paco_manual", 2);
  fs::remove_all(m.dir);
  std::tie(code, out) = m.run({"--set", "launch.mode=manual"});
  REQUIRE(code == 0);
  REQUIRE(has(out, "--role store --resume"));
  REQUIRE(has(out, "--role worker --worker 1 --resume"));
  for (auto& f : {early, keep, r.out(), m.out()}) fs::remove(f);
  fs::remove_all(r.dir);
  fs::remove_all(m.dir);
}

TEST_CASE("a store that stops answering for a while costs no restarts; the run finishes",
          "[multiproc][broken]") {
  // The store is stopped (SIGSTOP) until a worker has lost its link to it and exited 3. That
  // is the store's doing, not the workers': with launch.restarts = 1 the run used to fail
  // blaming a worker.
  auto r = make_run("paco_stall", 8);
  fs::remove_all(r.dir);
  // Rounds long enough (150 inner steps) that the stall lands mid-run on a fast machine: with
  // 30 the run could end before the store was stopped, and no link was lost.
  const pid_t launcher = r.start({"--set", "launch.restarts=1", "--set", "dipaco.inner_steps=150"});
  REQUIRE(launcher > 0);
  REQUIRE(paco::testing::wait_until([&] { return fs::exists(r.dir / "worker-1.jsonl"); }, 120s));
  const auto store = paco::testing::find_processes({"--role store", r.dir.string()});
  REQUIRE(store.size() == 1);
  REQUIRE(::kill(store[0], SIGSTOP) == 0);
  // A worker feels the stall when it next waits on the store for a peer timeout (5 s): after
  // its round's inner steps, so a fixed pause could end first (it did, on a slow machine).
  const bool felt = paco::testing::wait_until(
      [&] { return has(slurp(r.out()), "it lost its link to the store: not counted"); }, 120s);
  REQUIRE(::kill(store[0], SIGCONT) == 0);
  REQUIRE(felt);
  const int code = paco::testing::exit_code(paco::testing::wait_exit(launcher, 240s));
  const std::string out = slurp(r.out());
  INFO(out);
  REQUIRE(code == 0);
  REQUIRE(has(out, "all (routed)"));
  REQUIRE(has(out, "it lost its link to the store: not counted"));  // the stall was felt
  REQUIRE(!has(out, " of 1)"));  // and no restart was counted against the budget
  // The store itself survived its stall: it used to crash after SIGCONT answering waits on
  // links that died meanwhile (store::server::answer_waits), and was restarted.
  REQUIRE(!has(out, "store stopped ("));
  fs::remove_all(r.dir);
  fs::remove(r.out());
}

TEST_CASE("without a launcher a stalled store costs nothing: its workers rejoin in their processes",
          "[multiproc][broken]") {
  // Processes started by hand (launch.mode = "manual"'s commands; the ranks of an mpirun launch
  // are the same: nobody restarts a process that exits) used to exit 3 on the first link the
  // stall cost, which ended the job. Each worker now resumes from its checkpoint in its process.
  auto r = make_run("paco_stall_manual", 8);
  fs::remove_all(r.dir);
  ::setenv("PACO_TOKEN", "stall-manual-secret", 1);
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"--set", "launch.mode=manual", "--set", "dipaco.inner_steps=150"};
    a.insert(a.end(), extra.begin(), extra.end());
    return r.args(a);
  };
  const std::string dir = r.dir.string();
  {
    const pid_t p = paco::testing::spawn_logged(with({}), dir + ".prepare.out");
    REQUIRE(paco::testing::exit_code(paco::testing::wait_exit(p, 120s)) == 0);
  }
  const pid_t store =
      paco::testing::spawn_logged(with({"--role", "store", "--run-dir", dir}), dir + ".store.out");
  std::vector<pid_t> workers;
  const auto worker_out = [&](int w) { return dir + ".worker" + std::to_string(w) + ".out"; };
  for (int w = 1; w <= 4; ++w)
    workers.push_back(paco::testing::spawn_logged(
        with({"--role", "worker", "--worker", std::to_string(w), "--resume", "--run-dir", dir}),
        worker_out(w)));
  REQUIRE(paco::testing::wait_until([&] { return fs::exists(r.dir / "worker-1.jsonl"); }, 120s));
  REQUIRE(::kill(store, SIGSTOP) == 0);
  // Felt when a worker next waits on the store for a peer timeout (1 s here).
  const auto rejoined = [&] {
    int n = 0;
    for (int w = 1; w <= 4; ++w) n += has(slurp(worker_out(w)), "rejoining from its checkpoint");
    return n;
  };
  const bool felt = paco::testing::wait_until([&] { return rejoined() > 0; }, 120s);
  std::this_thread::sleep_for(3s);  // a stall of several peer timeouts
  REQUIRE(::kill(store, SIGCONT) == 0);
  REQUIRE(felt);
  for (int w = 1; w <= 4; ++w) {
    INFO("worker " << w << ": " << slurp(worker_out(w)));
    REQUIRE(paco::testing::exit_code(paco::testing::wait_exit(workers[std::size_t(w - 1)], 300s)) ==
            0);
    REQUIRE(!has(slurp(worker_out(w)), "giving up"));
  }
  const std::string store_out = slurp(dir + ".store.out");
  INFO(store_out);
  REQUIRE(paco::testing::exit_code(paco::testing::wait_exit(store, 120s)) == 0);
  // Every module closed the last round (grid 2x2: modules 0-3).
  for (int m = 0; m < 4; ++m)
    REQUIRE(has(store_out, "module " + std::to_string(m) + " round 7 closed"));
  fs::remove_all(r.dir);
  for (const std::string f : {".prepare.out", ".store.out"}) fs::remove(dir + f);
  for (int w = 1; w <= 4; ++w) fs::remove(worker_out(w));
}
