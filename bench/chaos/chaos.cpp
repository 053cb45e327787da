// bench_chaos: randomized kill -9 trials against the multi-process DiPaCo job (paco_train,
// job.mode = "dipaco") on a grid with a path-specific level (grid 1x4: level 0 shared by the
// four paths, level 1 one module per path), one store and four worker processes over TCP.
//
// Kinds (each run for --trials trials, at a random moment 0-1.2 s after the first round):
//   worker       kill -9 of one random worker (the launcher restarts it; it rejoins)
//   store        kill -9 of the store (the launcher restarts it from its checkpoint)
//   launcher     kill -9 of the launcher; then the same command with --resume
//   two_workers  kill -9 of two workers (partners through the shared level-0 module) at once
// After each trial: the run finished (exit 0, results table), every module's checkpointed θ
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
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "paco/core/hash.hpp"
#include "paco/core/rng.hpp"
#include "paco/io/safetensors.hpp"
#include "paco/testing/processes.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using paco::testing::find_processes;
using paco::testing::slurp;

namespace {

struct options {
  int trials = 20, rounds = 16;
  double round_timeout_s = 3;
  std::uint64_t seed = 0;
  bool keep = false;
  std::vector<std::string> kinds = {"worker", "store", "launcher", "two_workers"};
};

struct row {
  std::string kill;
  int trials = 0, finished = 0, ontime_refused = 0, orphans = 0;
  double max_close_s = 0;
};

struct trial_result {
  bool finished = false, hashes_ok = false, missed = false;  // missed: the run ended first
  int ontime_refused = 0, orphans = 0;
  int budget_used = 0;  // store trials: worker restarts counted against their budget
  double max_close_s = 0;
  std::string why;
};

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

trial_result run_trial(const options& o, const std::string& kind, int trial, paco::rng& r) {
  trial_result t;
  const fs::path dir = fs::temp_directory_path() / ("paco_chaos_" + std::to_string(::getpid()) +
                                                    "_" + kind + "_" + std::to_string(trial));
  fs::remove_all(dir);
  const fs::path out = dir.string() + ".out";
  auto args = job_args(o, dir);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t launcher = paco::testing::spawn_logged(args, out);
  if (launcher < 0) return t.why = "cannot start paco_train", t;
  // A random moment after the first round anywhere.
  paco::testing::wait_until(
      [&] {
        for (int w = 1; w <= 4; ++w)
          if (fs::exists(dir / ("worker-" + std::to_string(w) + ".jsonl"))) return true;
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
  } else if (kind == "store") {
    const pid_t p = pid_of({"--role store", d});
    if (p > 0) ::kill(p, SIGKILL);
    t.missed = p <= 0;
    what = p > 0 ? "the store" : "nothing (the store was gone)";
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
  const std::string text = slurp(kind == "launcher" ? fs::path(dir.string() + ".resume.out") : out);
  t.finished = code == 0 && text.find("all (routed)") != std::string::npos;
  if (!t.finished) t.why = "paco_train exited with " + std::to_string(code);
  if (kind == "store") {  // a store crash must not use up the workers' restarts
    static const std::regex counted(R"(worker-\d+ stopped \([^)]*\); restarting it \(\d+ of)");
    t.budget_used = int(std::distance(std::sregex_iterator(text.begin(), text.end(), counted),
                                      std::sregex_iterator()));
    if (t.budget_used && t.why.empty())
      t.why = std::to_string(t.budget_used) + " worker restarts counted after the store kill";
  }
  check_run(o, dir, t);
  std::printf(
      "[chaos] %-11s trial %2d: killed %s; finished %d, hashes %s, on-time pushes refused "
      "%d, orphans %d, longest round %.2f s, run %.1f s%s%s\n",
      kind.c_str(), trial, what.c_str(), int(t.finished), t.hashes_ok ? "ok" : "BAD",
      t.ontime_refused, t.orphans, t.max_close_s, run_s, t.why.empty() ? "" : ": ", t.why.c_str());
  std::fflush(stdout);
  if (t.finished && t.hashes_ok && !t.ontime_refused && !t.orphans && !t.budget_used && !o.keep) {
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
    if (k != "worker" && k != "store" && k != "launcher" && k != "two_workers")
      return std::fprintf(stderr, "bench_chaos: unknown kind '%s'\n", k.c_str()), 2;
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
      auto t = run_trial(o, k, i, r);
      ++w.trials;
      w.finished += t.finished && t.hashes_ok;
      w.ontime_refused += t.ontime_refused;
      w.orphans += t.orphans;
      w.max_close_s = std::max(w.max_close_s, t.max_close_s);
      missed += t.missed;
      all_good &= t.finished && t.hashes_ok && !t.ontime_refused && !t.orphans && !t.budget_used;
    }
    rows.push_back(w);
  }
  std::printf("[chaos] %d kill(s) found their process gone (the run had ended first)\n", missed);
  std::string json = "{\"bench\":\"chaos\",\"rows\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    char b[256];
    std::snprintf(b, sizeof b,
                  "%s{\"kill\":\"%s\",\"trials\":%d,\"finished\":%d,\"ontime_pushes_refused\":%d,"
                  "\"orphans\":%d,\"max_close_s\":%.2f}",
                  i ? "," : "", rows[i].kill.c_str(), rows[i].trials, rows[i].finished,
                  rows[i].ontime_refused, rows[i].orphans, rows[i].max_close_s);
    json += b;
  }
  char tail[64];
  std::snprintf(tail, sizeof tail, "],\"round_timeout_s\":%g}", o.round_timeout_s);
  std::printf("%s%s\n", json.c_str(), tail);
  return all_good ? 0 : 1;
}
