// bench_chaos: randomized kill -9 trials against the multi-process DiPaCo job (paco_train,
// job.mode = "dipaco") on a grid with a path-specific level (grid 1x4: level 0 shared by the
// four paths, level 1 one module per path), one store and four worker processes over TCP.
//
// Kinds (each run for --trials trials, at a random moment 0-1.2 s after the first round):
//   worker       kill -9 of one random worker (the launcher restarts it; it rejoins)
//   store        kill -9 of the store (the launcher restarts it from its checkpoint)
//   launcher     kill -9 of the launcher; then the same command with --resume
//   two_workers  kill -9 of two workers (partners through the shared level-0 module) at once
//   store_stall  SIGSTOP of the store for 2-6 s, then SIGCONT (workers lose their links)
//   stray_store  a second `--role store` (no --resume) started on the live run: it must refuse
//   full_disk    the run directory (a 16 MB tmpfs) filled up: the run must fail loudly (non-zero
//                exit naming a failed write, no results table), then resume whole once freed
//   read_only    the run directory made immutable (chattr +i): the same
//   wiped_worker one random worker stopped (SIGSTOP), its checkpoint and log deleted, then
//                kill -9: the launcher restarts it with nothing of its own, and it must join
//                where the store is (fresh inner state; job/worker_role.hpp) and log every round
//                from there to the last
// and against DiLoCo over an all-reduce (examples/diloco_ranks: 3 ranks by run_local.sh over
// TCP, int8, checkpoints after every round, --deadline 6 s):
//   allreduce_kill  kill -9 of one random rank: every rank must end non-zero within the deadline
//                   plus run_local.sh's grace, none left behind; then --resume must end
//                   bit-identical (θ hash) to an uninterrupted run of the same flags
//   straggler       SIGSTOP of one random rank, never resumed: the same (no hang past the
//                   deadline; the stopped rank is killed by run_local.sh, also when it was
//                   stopped after the last sync: RUN_LOCAL_FINISH = 15 s here)
// and against paco_train's pipeline job (job.mode = "pipeline": 2 stages, local losses, a tiny
// GPT, 200 steps over links of 20 ms, a checkpoint every 5 steps):
//   stage_kill      kill -9 of one random stage at a random moment of training: the launcher
//                   restarts the pipeline from the newest step both stages hold; the run must
//                   end with the gathered model's hash equal to an uninterrupted run's
// and against the DiPaCo job with its paths cut into 2 stages (dipaco.stages = 2, local losses;
// the grid and settings of the first kinds, 8 stage processes):
//   staged_dipaco_kill  kill -9 of one random stage of one random worker: the launcher stops
//                   that worker's other stage and restarts both from their newest common
//                   checkpoint; the run must end whole (as the first kinds check), and every
//                   stage must have taken rounds × H steps (their lockstep)
// A kind this machine cannot stage (no tmpfs mount, no chattr) is skipped with the reason.
// After each trial: the run finished (exit 0, results table; for full_disk and read_only after
// the loud failure and a --resume), every module's checkpointed θ
// hashes to the hash the store logged at its last close and every module reached the last
// round, no on-time push was refused (the store logs each refusal as on time or late), and for
// the launcher trial no process of the run was left 10 s after the kill (orphans), and for the
// store trial no worker restart was counted against its budget. max_close_s:
// the longest time a round stayed open, as the store logged it (a round open during a store
// restart is timed from the restarted store's start).
//
//   bench_chaos [--trials N] [--kinds worker,store,launcher,two_workers] [--rounds R (16)]
//               [--round-timeout S (3)] [--seed X] [--keep]
// The round timeout is short so that a killed worker's own (path-specific) module closes empty
// rounds while it restarts, and its rejoin needs the store's re-alignment.
// Exit status 1 if a trial did not finish, lost a module, refused an on-time push, left an
// orphan or charged a store crash to the workers' restart budget. LAST line:
// {"bench":"chaos","rows":[...],"round_timeout_s":T}.
#include <sys/mount.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "paco/core/hash.hpp"
#include "paco/core/rng.hpp"
#include "paco/io/json_read.hpp"
#include "paco/io/safetensors.hpp"
#include "support/processes.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using paco::testing::find_processes;
using paco::testing::slurp;
using paco::testing::spawn_logged;

namespace {

struct options {
  int trials = 20, rounds = 16;
  double round_timeout_s = 3;
  std::uint64_t seed = 0;
  bool keep = false;
  std::vector<std::string> kinds = {
      "worker",      "store",       "launcher",          "two_workers", "wiped_worker",
      "store_stall", "stray_store", "full_disk",         "read_only",   "allreduce_kill",
      "straggler",   "stage_kill",  "staged_dipaco_kill"};
};

const std::vector<std::string> all_kinds = {
    "worker",      "store",       "launcher",          "two_workers", "wiped_worker",
    "store_stall", "stray_store", "full_disk",         "read_only",   "allreduce_kill",
    "straggler",   "stage_kill",  "staged_dipaco_kill"};

bool allreduce_kind(const std::string& k) {
  return k == "allreduce_kill" || k == "straggler";
}

struct row {
  std::string kill;
  int trials = 0, finished = 0, failed_loudly = 0, skipped = 0, ontime_refused = 0, orphans = 0;
  double max_close_s = 0;
};

struct trial_result {
  bool finished = false, hashes_ok = false, missed = false;  // missed: the run ended first
  bool failed_loudly = false;  // full_disk, read_only, stray_store: the designed failure
  std::string skipped;         // why the kind cannot be staged here (empty: it ran)
  int ontime_refused = 0, orphans = 0;
  int budget_used = 0;     // store trials: worker restarts counted against their budget
  int store_restarts = 0;  // store_stall: the store restarted (it must survive a stall itself)
  double max_close_s = 0;
  std::string why;
};

// Whether the launcher's output tells of a store restart ("store stopped (...); restarting it").
bool has_store_restart(const std::string& launcher_out) {
  return launcher_out.find("store stopped (") != std::string::npos;
}

std::vector<std::string> job_args(const options& o, const fs::path& dir) {
  return paco::testing::small_dipaco_job(
      PACO_SOURCE_DIR, PACO_BINARY_DIR, dir, o.rounds, o.round_timeout_s,
      {"--set", "dipaco.grid=[1, 4]", "--set", "launch.restarts=3"});
}

// Checks a finished run's directory: hashes, last rounds, refusals and round times.
void check_run(const options& o, const fs::path& dir, trial_result& t) {
  const std::string log = slurp(dir / "store.log");
  static const std::regex close_re(
      R"(module (\d+) round (\d+) closed with (\d+)/(\d+) pushes after ([0-9.]+) s.*hash ([0-9a-f]{16}))");
  std::map<int, std::pair<long, std::string>> last;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), close_re);
       it != std::sregex_iterator(); ++it) {
    last[std::stoi((*it)[1])] = {std::stol((*it)[2]), (*it)[6]};
    t.max_close_s = std::max(t.max_close_s, std::stod((*it)[5]));
  }
  for (std::size_t p = log.find("(on time)"); p != std::string::npos;
       p = log.find("(on time)", p + 1))
    ++t.ontime_refused;
  auto ck = paco::io::load_safetensors(dir / "store.safetensors");
  if (!ck) return void(t.why = "store checkpoint: " + ck.error().what());
  if (last.size() != 5)
    return void(t.why = std::to_string(last.size()) + " modules in the store log");
  for (auto& [m, rh] : last) {
    if (rh.first != o.rounds - 1)
      return void(t.why = "module " + std::to_string(m) + " ended at round " +
                          std::to_string(rh.first));
    const auto& th = ck->tensors.at("module." + std::to_string(m) + ".theta").values;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  (unsigned long long)paco::hash64(th.data(), th.size() * sizeof(float)));
    if (rh.second != hex)
      return void(t.why = "module " + std::to_string(m) + " hashes to " + hex + ", the log says " +
                          rh.second);
  }
  t.hashes_ok = true;
}

// Runs the launcher to its end; returns its exit code (-1: killed after the timeout).
int finish(pid_t launcher) {
  const int st = paco::testing::wait_exit(launcher, 600s);
  return st < 0 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Whether the failure in `text` (a launcher's output) is the loud one a broken run must end in.
bool loud_write_failure(int code, const std::string& text) {
  return code > 0 && text.find("could not write its checkpoint or log") != std::string::npos &&
         text.find("all (routed)") == std::string::npos;
}

// ---- DiLoCo over an all-reduce (examples/diloco_ranks) ----
constexpr int ar_ranks = 3, ar_deadline_s = 6, ar_grace_s = 5, ar_finish_s = 15;

// run_local.sh with the chaos flags (checkpoints in dir when given), its output in out.
pid_t start_ranks(const fs::path& dir, const fs::path& out, bool resume) {
  std::vector<std::string> a = {
      "/bin/bash",
      (fs::path(PACO_SOURCE_DIR) / "examples" / "diloco_ranks" / "run_local.sh").string(),
      (fs::path(PACO_BINARY_DIR) / "examples" / "diloco_ranks" / "example_diloco_ranks").string(),
      std::to_string(ar_ranks),
      "--rounds",
      "12",
      "--inner",
      "20",
      "--d",
      "32",
      "--ctx",
      "32",
      "--layers",
      "2",
      "--heads",
      "2",
      "--batch",
      "4",
      "--compress",
      "int8",
      "--deadline",
      std::to_string(ar_deadline_s)};
  if (!dir.empty()) a.insert(a.end(), {"--checkpoint-dir", dir.string()});
  if (resume) a.push_back("--resume");
  return spawn_logged(a, out);
}

// The final θ hash run_local.sh printed ("" if none).
std::string ranks_hash(const std::string& text) {
  static const std::regex re(R"(final theta hashes: ([0-9a-f]{16}) ?\n)");
  std::smatch m;
  return std::regex_search(text, m, re) ? m[1].str() : "";
}

// The hash of an uninterrupted run of the chaos flags (computed once).
const std::string& reference_hash() {
  static const std::string h = [] {
    const fs::path out =
        fs::temp_directory_path() / ("paco_chaos_ref_" + std::to_string(::getpid()));
    const pid_t p = start_ranks({}, out, false);
    paco::testing::wait_exit(p, 300s);
    const std::string hash = ranks_hash(slurp(out));
    fs::remove(out);
    return hash;
  }();
  return h;
}

trial_result run_allreduce_trial(const std::string& kind, int trial, paco::rng& r) {
  trial_result t;
  const fs::path dir = fs::temp_directory_path() / ("paco_chaos_" + std::to_string(::getpid()) +
                                                    "_" + kind + "_" + std::to_string(trial));
  fs::remove_all(dir);
  const fs::path out = dir.string() + ".out", again = dir.string() + ".resume.out";
  const std::string want = reference_hash();
  if (want.empty()) return t.why = "the uninterrupted reference run failed", t;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t script = start_ranks(dir, out, false);
  // A random moment after the first checkpoint.
  paco::testing::wait_until([&] { return fs::exists(dir / "rank-0.round-0.safetensors"); }, 120s);
  std::this_thread::sleep_for(std::chrono::milliseconds(r.below(1500)));
  // The ranks, not run_local.sh (whose command line names the binary too).
  const std::string rank_cmd = "example_diloco_ranks --rounds";
  auto ranks = find_processes({rank_cmd, "--checkpoint-dir " + dir.string()});
  std::string what = "nothing (the run had ended)";
  const auto hit = std::chrono::steady_clock::now();
  if (!ranks.empty()) {
    const pid_t victim = ranks[r.below(ranks.size())];
    ::kill(victim, kind == "allreduce_kill" ? SIGKILL : SIGSTOP);
    what = kind == "allreduce_kill" ? "a rank killed" : "a rank stopped for good";
  }
  t.missed = ranks.empty();
  const int code = paco::testing::exit_code(paco::testing::wait_exit(script, 120s));
  const double ended_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - hit).count();
  // Loud: the script failed, within the deadline plus its grace (and some slack for a 2-core
  // machine), and no rank of the run is left.
  paco::testing::wait_until([&] { return find_processes({rank_cmd, dir.string()}).empty(); }, 5s);
  for (pid_t p : find_processes({rank_cmd, dir.string()})) {
    ++t.orphans;
    ::kill(p, SIGKILL);
  }
  t.failed_loudly =
      t.missed || (code > 0 && ended_s < ar_deadline_s + std::max(ar_grace_s, ar_finish_s) + 10);
  if (!t.failed_loudly)
    t.why = "run_local.sh exited " + std::to_string(code) + " " + std::to_string(ended_s) +
            " s after the fault";
  const int resumed =
      paco::testing::exit_code(paco::testing::wait_exit(start_ranks(dir, again, !t.missed), 300s));
  const std::string got = ranks_hash(slurp(t.missed ? out : again));
  t.finished = (t.missed ? code : resumed) == 0;
  t.hashes_ok = got == want;
  if (t.why.empty() && !t.finished) t.why = "the resumed run exited " + std::to_string(resumed);
  if (t.why.empty() && !t.hashes_ok) t.why = "θ " + got + " differs from the uninterrupted " + want;
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "[chaos] %-14s trial %2d: %s; %s after %.1f s, finished %d, hash %s, orphans %d, run "
      "%.1f s%s%s\n",
      kind.c_str(), trial, what.c_str(), t.failed_loudly ? "failed loudly" : "NO LOUD FAILURE",
      ended_s, int(t.finished), t.hashes_ok ? "identical" : "BAD", t.orphans, run_s,
      t.why.empty() ? "" : ": ", t.why.c_str());
  std::fflush(stdout);
  if (t.finished && t.hashes_ok && t.failed_loudly && !t.orphans) {
    fs::remove_all(dir);
    fs::remove(out);
    fs::remove(again);
  }
  return t;
}

// paco_train's pipeline job of the stage_kill kind, its output to `out`.
pid_t start_pipeline(const fs::path& dir, const fs::path& out) {
  std::vector<std::string> a{
      std::string(PACO_BINARY_DIR) + "/examples/paco_train/paco_train", "-c",
      std::string(PACO_SOURCE_DIR) + "/examples/configs/pipeline_brown.toml"};
  for (std::string kv :
       {"model.d=32", "model.layers=2", "model.heads=2", "model.ctx=64", "train.batch=4",
        "train.steps=200", "train.warmup=2", "train.checkpoint_every=5", "launch.restarts=3",
        "pipeline.eval_tokens=2000", "pipeline.timeout_s=20", "pipeline.link_latency_ms=20"})
    a.insert(a.end(), {"--set", kv});
  a.insert(a.end(), {"--set", "output.dir=" + dir.string()});
  return spawn_logged(a, out);
}

// The gathered model's hash in a pipeline run's results.json ("" if none).
std::string pipeline_hash(const fs::path& dir) {
  static const std::regex re(R"re("theta_hash": "([0-9a-f]{16})")re");
  std::smatch m;
  const std::string text = slurp(dir / "results.json");
  return std::regex_search(text, m, re) ? m[1].str() : "";
}

trial_result run_stage_trial(int trial, paco::rng& r) {
  trial_result t;
  const std::string tag = "paco_chaos_" + std::to_string(::getpid()) + "_stage_kill_";
  static const std::string want = [&] {  // an uninterrupted run, once
    const fs::path ref = fs::temp_directory_path() / (tag + "ref");
    fs::remove_all(ref);
    paco::testing::wait_exit(start_pipeline(ref, ref.string() + ".out"), 300s);
    const std::string h = pipeline_hash(ref);
    fs::remove_all(ref);
    fs::remove(ref.string() + ".out");
    return h;
  }();
  if (want.empty()) return t.why = "the uninterrupted reference run failed", t;
  const fs::path dir = fs::temp_directory_path() / (tag + std::to_string(trial));
  const fs::path out = dir.string() + ".out";
  fs::remove_all(dir);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t launcher = start_pipeline(dir, out);
  // A random moment of training: after the first checkpoint, 0-3 s on (the run trains ~4.5 s).
  paco::testing::wait_until([&] { return fs::exists(dir / "stage-1.step-5.safetensors"); }, 120s);
  std::this_thread::sleep_for(std::chrono::milliseconds(r.below(3000)));
  const int victim = int(r.below(2));
  auto stage = find_processes({"--role stage", "--stage " + std::to_string(victim), dir.string()});
  std::string what = "nothing (the run had ended)";
  if (!stage.empty()) {
    ::kill(stage[0], SIGKILL);
    what = "stage " + std::to_string(victim) + " killed";
  }
  t.missed = stage.empty();
  const int code = paco::testing::exit_code(paco::testing::wait_exit(launcher, 300s));
  paco::testing::wait_until([&] { return find_processes({"--role", dir.string()}).empty(); }, 10s);
  for (pid_t p : find_processes({"--role", dir.string()})) {
    ++t.orphans;
    ::kill(p, SIGKILL);
  }
  const std::string text = slurp(out);
  t.finished = code == 0;
  const std::string got = pipeline_hash(dir);
  t.hashes_ok = got == want;
  const bool restarted = text.find("restarting the pipeline from") != std::string::npos;
  if (!t.finished) t.why = "the launcher exited " + std::to_string(code);
  if (t.why.empty() && !t.hashes_ok) t.why = "θ " + got + " differs from the uninterrupted " + want;
  if (t.why.empty() && !t.missed && !restarted) t.why = "no restart after the kill";
  t.hashes_ok = t.hashes_ok && (t.missed || restarted);
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[chaos] %-14s trial %2d: %s; finished %d, hash %s, orphans %d, run %.1f s%s%s\n",
              "stage_kill", trial, what.c_str(), int(t.finished), t.hashes_ok ? "identical" : "BAD",
              t.orphans, run_s, t.why.empty() ? "" : ": ", t.why.c_str());
  std::fflush(stdout);
  if (t.finished && t.hashes_ok && !t.orphans) {
    fs::remove_all(dir);
    fs::remove(out);
  }
  return t;
}

// Whether a trial of `kind` went as designed.
bool good(const std::string& kind, const trial_result& t) {
  const bool loud_expected =
      kind == "full_disk" || kind == "read_only" || kind == "stray_store" || allreduce_kind(kind);
  return t.finished && t.hashes_ok && !t.ontime_refused && !t.orphans && !t.budget_used &&
         !t.store_restarts && (!loud_expected || t.failed_loudly);
}

trial_result run_trial(const options& o, const std::string& kind, int trial, paco::rng& r) {
  trial_result t;
  const fs::path dir = fs::temp_directory_path() / ("paco_chaos_" + std::to_string(::getpid()) +
                                                    "_" + kind + "_" + std::to_string(trial));
  fs::remove_all(dir);
  const fs::path out = dir.string() + ".out";
  auto args = job_args(o, dir);
  const bool staged = kind == "staged_dipaco_kill";
  if (staged) args.insert(args.end(), {"--set", "dipaco.stages=2"});
  // The staging of the disk kinds: a small tmpfs as the run directory, or chattr.
  const std::string immutable = "chattr +i '" + dir.string() + "'",
                    mutable_again = "chattr -i '" + dir.string() + "' 2>/dev/null";
  struct undo_t {
    std::function<void()> f;
    ~undo_t() {
      if (f) f();
    }
  } undo;
  if (kind == "full_disk") {
    fs::create_directories(dir);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=16m") != 0)
      return t.skipped = std::string("cannot mount a tmpfs: ") + std::strerror(errno), t;
    undo.f = [dir] { ::umount2(dir.c_str(), MNT_DETACH); };
  } else if (kind == "read_only") {
    fs::create_directories(dir);
    if (std::system((immutable + " 2>/dev/null && " + mutable_again).c_str()) != 0)
      return t.skipped = "chattr +i is not permitted here", t;
    undo.f = [mutable_again] { (void)std::system(mutable_again.c_str()); };
  }
  const auto t0 = std::chrono::steady_clock::now();
  pid_t launcher = paco::testing::spawn_logged(args, out);
  if (launcher < 0) return t.why = "cannot start paco_train", t;
  // A random moment after the first round anywhere.
  paco::testing::wait_until(
      [&] {
        for (int w = 1; w <= 4; ++w)
          for (const char* log : {".jsonl", "-stage-0.jsonl", "-stage-1.jsonl"})
            if (fs::exists(dir / ("worker-" + std::to_string(w) + log))) return true;
        return false;
      },
      120s);
  std::this_thread::sleep_for(std::chrono::milliseconds(r.below(1200)));
  const std::string d = dir.string();
  auto pid_of = [&](const std::vector<std::string>& needles) {
    auto v = find_processes(needles);
    return v.empty() ? pid_t(-1) : v.front();
  };
  std::string what;
  int code = -1;
  int wiped = 0;  // wiped_worker: the worker whose files were deleted
  if (kind == "worker" || kind == "two_workers") {
    const int a = 1 + int(r.below(4));
    int b = kind == "two_workers" ? 1 + int(r.below(3)) : 0;
    if (b >= a) ++b;
    for (int w : {a, b})
      if (w > 0) {
        const pid_t p = pid_of({"--role worker", "--worker " + std::to_string(w), d});
        if (p > 0) ::kill(p, SIGKILL);
        t.missed |= p <= 0;
        what += (what.empty() ? "worker " : " and ") + std::to_string(w) + (p > 0 ? "" : " (gone)");
      }
    code = finish(launcher);
  } else if (staged) {
    const int w = 1 + int(r.below(4)), k = int(r.below(2));
    const pid_t p = pid_of({"--role worker", "--worker " + std::to_string(w),
                            "--stage " + std::to_string(k) + " ", d});
    if (p > 0) ::kill(p, SIGKILL);
    t.missed = p <= 0;
    what = "worker " + std::to_string(w) + " stage " + std::to_string(k) + (p > 0 ? "" : " (gone)");
    code = finish(launcher);
  } else if (kind == "wiped_worker") {
    wiped = 1 + int(r.below(4));
    const pid_t p = pid_of({"--role worker", "--worker " + std::to_string(wiped), d});
    t.missed = p <= 0;
    if (p > 0) {
      // Stopped first, so that it cannot write its checkpoint or log again before it dies.
      ::kill(p, SIGSTOP);
      for (const char* ext : {".safetensors", ".jsonl"})
        fs::remove(dir / ("worker-" + std::to_string(wiped) + ext));
      ::kill(p, SIGKILL);
    }
    what = "worker " + std::to_string(wiped) + (p > 0 ? " wiped" : " (gone)");
    code = finish(launcher);
  } else if (kind == "store") {
    const pid_t p = pid_of({"--role store", d});
    if (p > 0) ::kill(p, SIGKILL);
    t.missed = p <= 0;
    what = p > 0 ? "the store" : "nothing (the store was gone)";
    code = finish(launcher);
  } else if (kind == "store_stall") {
    const pid_t p = pid_of({"--role store", d});
    const auto stall = std::chrono::milliseconds(2000 + r.below(4000));
    if (p > 0 && ::kill(p, SIGSTOP) == 0) {
      std::this_thread::sleep_for(stall);
      ::kill(p, SIGCONT);
    }
    t.missed = p <= 0;
    what = p > 0 ? "the store stopped " + std::to_string(stall.count()) + " ms" : "nothing";
    code = finish(launcher);
  } else if (kind == "stray_store") {
    auto stray = args;
    stray.insert(stray.end(), {"--role", "store"});
    const fs::path stray_out = dir.string() + ".stray.out";
    const int sc =
        paco::testing::exit_code(paco::testing::wait_exit(spawn_logged(stray, stray_out), 60s));
    const std::string st = slurp(stray_out);
    t.failed_loudly = sc == 2 && st.find("holds a store checkpoint") != std::string::npos;
    if (!t.failed_loudly) t.why = "the stray store exited " + std::to_string(sc) + ": " + st;
    fs::remove(stray_out);
    what = "a stray store role";
    code = finish(launcher);
  } else if (kind == "full_disk" || kind == "read_only") {
    fs::path filler = dir / "filler";
    if (kind == "full_disk") {
      std::ofstream f(filler, std::ios::binary);
      const std::vector<char> block(1 << 16, 'x');
      while (f.write(block.data(), std::streamsize(block.size())) && f.flush()) {
      }
      what = "the disk filled";
    } else {
      what = std::system(immutable.c_str()) == 0 ? "the directory made read-only"
                                                 : "nothing (chattr failed)";
    }
    code = finish(launcher);
    const std::string text = slurp(out);
    t.failed_loudly = loud_write_failure(code, text);
    if (!t.failed_loudly) t.why = "exit " + std::to_string(code) + " without the loud failure";
    paco::testing::wait_until([&] { return find_processes({"--role", d}).empty(); }, 10s);
    for (pid_t p : find_processes({"--role", d})) {
      ++t.orphans;
      ::kill(p, SIGKILL);
    }
    if (kind == "full_disk")
      fs::remove(filler);
    else
      (void)std::system(mutable_again.c_str());
    args.push_back("--resume");
    launcher = paco::testing::spawn_logged(args, dir.string() + ".resume.out");
    code = finish(launcher);
  } else {
    ::kill(launcher, SIGKILL);
    finish(launcher);
    what = "the launcher";
    // Nothing of the run may survive it.
    paco::testing::wait_until([&] { return find_processes({"--role", d}).empty(); }, 10s);
    for (pid_t p : find_processes({"--role", d})) {
      ++t.orphans;
      ::kill(p, SIGKILL);
    }
    args.push_back("--resume");
    launcher = paco::testing::spawn_logged(args, dir.string() + ".resume.out");
    code = finish(launcher);
  }
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool resumed = kind == "launcher" || kind == "full_disk" || kind == "read_only";
  const std::string text = slurp(resumed ? fs::path(dir.string() + ".resume.out") : out);
  t.finished = code == 0 && text.find("all (routed)") != std::string::npos;
  if (!t.finished && t.why.empty()) t.why = "paco_train exited with " + std::to_string(code);
  const bool loud_expected = kind == "full_disk" || kind == "read_only" || kind == "stray_store";
  if (loud_expected && !t.failed_loudly && t.why.empty()) t.why = "no loud failure";
  if (kind == "store_stall" && has_store_restart(text)) {
    // A stall is survived by the store itself: a restart means it crashed after SIGCONT (the
    // heap corruption of answer_waits did so) and is a fault, though the run finished.
    t.store_restarts = 1;
    if (t.why.empty()) t.why = "the store was restarted after its stall";
  }
  if (kind == "store" || kind == "store_stall") {  // not the workers' fault: no budget used
    static const std::regex counted(R"(worker-\d+ stopped \([^)]*\); restarting it \(\d+ of)");
    t.budget_used = int(std::distance(std::sregex_iterator(text.begin(), text.end(), counted),
                                      std::sregex_iterator()));
    if (t.budget_used && t.why.empty())
      t.why = std::to_string(t.budget_used) + " worker restarts counted after the store " +
              (kind == "store" ? "kill" : "stall");
  }
  check_run(o, dir, t);
  if (staged && t.why.empty()) {
    // The killed stage's worker restarted its stages, and every stage took rounds × H steps.
    if (!t.missed && text.find("stages from their newest common checkpoint") == std::string::npos)
      t.why = "no restart of the worker's stages after the kill";
    for (int w = 1; w <= 4 && t.why.empty(); ++w)
      for (int k = 0; k < 2 && t.why.empty(); ++k) {
        const std::string name = "worker-" + std::to_string(w) + "-stage-" + std::to_string(k);
        const std::string log = slurp(dir / (name + ".jsonl"));
        const auto from = log.rfind('\n', log.size() > 1 ? log.size() - 2 : 0);
        const auto last =
            paco::io::json_parse(log.substr(from == std::string::npos ? 0 : from + 1), name);
        const long want = long(o.rounds) * 30;  // small_dipaco_job's H
        if (!last || !last->contains("step") || (*last)["step"] != want)
          t.why = name + " ended at step " +
                  (last && last->contains("step") ? (*last)["step"].dump() : "?") + ", not " +
                  std::to_string(want);
      }
    if (!t.why.empty()) t.hashes_ok = false;
  }
  if (wiped > 0 && !t.missed && t.why.empty()) {
    // Its new log (the old one was deleted): every round from where it joined to the last.
    const auto rounds = paco::testing::worker_log_values(dir, wiped, "round");
    bool consecutive = !rounds.empty() && rounds.back() == o.rounds - 1;
    for (std::size_t i = 1; consecutive && i < rounds.size(); ++i)
      consecutive = rounds[i] == rounds[i - 1] + 1;
    if (!consecutive) t.why = "the wiped worker's new log does not run on to the last round";
  }
  std::printf(
      "[chaos] %-11s trial %2d: %s; %sfinished %d, hashes %s, on-time pushes refused "
      "%d, orphans %d, longest round %.2f s, run %.1f s%s%s\n",
      kind.c_str(), trial, what.c_str(),
      loud_expected ? (t.failed_loudly ? "failed loudly, " : "NO LOUD FAILURE, ") : "",
      int(t.finished), t.hashes_ok ? "ok" : "BAD", t.ontime_refused, t.orphans, t.max_close_s,
      run_s, t.why.empty() ? "" : ": ", t.why.c_str());
  std::fflush(stdout);
  if (good(kind, t) && !o.keep) {
    undo.f = {};
    if (kind == "full_disk") ::umount2(dir.c_str(), MNT_DETACH);
    fs::remove_all(dir);
    fs::remove(out);
    fs::remove(dir.string() + ".resume.out");
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc || (i < argc && std::strcmp(argv[i], "--keep") == 0); ++i) {
    const std::string a = argv[i];
    if (a == "--keep") {
      o.keep = true;
      continue;
    }
    const std::string v = argv[++i];
    if (a == "--trials")
      o.trials = std::stoi(v);
    else if (a == "--rounds")
      o.rounds = std::stoi(v);
    else if (a == "--round-timeout")
      o.round_timeout_s = std::stod(v);
    else if (a == "--seed")
      o.seed = std::stoull(v);
    else if (a == "--kinds") {
      o.kinds.clear();
      for (std::size_t p = 0, q; p <= v.size(); p = q + 1) {
        q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        o.kinds.push_back(v.substr(p, q - p));
      }
    } else {
      std::fprintf(stderr, "bench_chaos: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  for (auto& k : o.kinds)
    if (std::find(all_kinds.begin(), all_kinds.end(), k) == all_kinds.end())
      return std::fprintf(stderr, "bench_chaos: unknown kind '%s'\n", k.c_str()), 2;
  // The launcher makes up a secret for the processes it starts; the stray store role started
  // here beside it needs one of its own to get as far as the run directory.
  ::setenv("PACO_TOKEN", "chaos-stray-role", 0);
  // A rank stopped after the last sync has no peer waiting for it: run_local.sh's bound on how
  // long ranks may lag one that finished is what ends that run.
  ::setenv("RUN_LOCAL_FINISH", std::to_string(ar_finish_s).c_str(), 1);
  paco::rng r(o.seed ? o.seed : std::uint64_t(::getpid()));
  std::printf(
      "[chaos] %d trials per kind; DiPaCo grid 1x4 (level 1 path-specific), %d rounds, "
      "round timeout %g s\n",
      o.trials, o.rounds, o.round_timeout_s);
  std::vector<row> rows;
  bool all_good = true;
  int missed = 0;
  for (auto& k : o.kinds) {
    row w{k};
    for (int i = 0; i < o.trials; ++i) {
      auto t = allreduce_kind(k)   ? run_allreduce_trial(k, i, r)
               : k == "stage_kill" ? run_stage_trial(i, r)
                                   : run_trial(o, k, i, r);
      if (!t.skipped.empty()) {
        std::printf("[chaos] %-11s skipped: %s\n", k.c_str(), t.skipped.c_str());
        w.skipped = o.trials;
        break;
      }
      ++w.trials;
      w.finished += t.finished && t.hashes_ok;
      w.failed_loudly += t.failed_loudly;
      w.ontime_refused += t.ontime_refused;
      w.orphans += t.orphans;
      w.max_close_s = std::max(w.max_close_s, t.max_close_s);
      missed += t.missed;
      all_good &= good(k, t);
    }
    rows.push_back(w);
  }
  std::printf("[chaos] %d kill(s) found their process gone (the run had ended first)\n", missed);
  std::string json = "{\"bench\":\"chaos\",\"rows\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    char b[320];
    std::snprintf(b, sizeof b,
                  "%s{\"kill\":\"%s\",\"trials\":%d,\"finished\":%d,\"failed_loudly\":%d,"
                  "\"skipped\":%d,\"ontime_pushes_refused\":%d,\"orphans\":%d,"
                  "\"max_close_s\":%.2f}",
                  i ? "," : "", rows[i].kill.c_str(), rows[i].trials, rows[i].finished,
                  rows[i].failed_loudly, rows[i].skipped, rows[i].ontime_refused, rows[i].orphans,
                  rows[i].max_close_s);
    json += b;
  }
  char tail[64];
  std::snprintf(tail, sizeof tail, "],\"round_timeout_s\":%g}", o.round_timeout_s);
  std::printf("%s%s\n", json.c_str(), tail);
  return all_good ? 0 : 1;
}
