#pragma once
// processes: POSIX helpers for tests and benchmarks that drive real processes (the multi-process
// DiPaCo job, the chaos suite): start a program with its output in a file, find processes by
// their command line, wait for a condition with a deadline. Linux only (/proc).

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"
#include "paco/store/metered.hpp"

extern char** environ;

namespace paco::testing {

// A base port b in [lo, hi) such that b … b + count − 1 could all be bound on 127.0.0.1 a moment
// ago (fixed-port tests that run beside others: each draws its own block), or −1. Candidates
// start from this process's id, so concurrent tests try different blocks first.
inline int free_port_block(int count, int lo = 12000, int hi = 32000) {
  const int span = (hi - lo) / count;
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base =
        lo + int((std::uint64_t(::getpid()) * 7919u + std::uint64_t(attempt) * 104729u) %
                 std::uint64_t(span)) *
                 count;
    bool all = true;
    for (int q = base; q < base + count && all; ++q) {
      const int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(std::uint16_t(q));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      all = s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      if (s >= 0) ::close(s);
    }
    if (all) return base;
  }
  return -1;
}

// The whole content of a file ("" if it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Pids of the live (not zombie) processes, other than this one, whose command line holds every
// one of `needles`.
inline std::vector<pid_t> find_processes(const std::vector<std::string>& needles) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    const std::string stat = slurp(std::filesystem::path("/proc") / e->d_name / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos || (close + 2 < stat.size() && stat[close + 2] == 'Z')) continue;
    std::string cmd = slurp(std::filesystem::path("/proc") / e->d_name / "cmdline");
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    bool all = !cmd.empty();
    for (auto& n : needles) all &= cmd.find(n) != std::string::npos;
    if (all) out.push_back(pid);
  }
  closedir(d);
  return out;
}

// Starts args[0] with args, stdout and stderr to `out` (truncated), with `env_unset` removed
// from its environment. Returns the pid, or -1.
inline pid_t spawn_logged(const std::vector<std::string>& args, const std::filesystem::path& out,
                          const std::vector<std::string>& env_unset = {}) {
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    bool drop = false;
    for (auto& u : env_unset) drop |= std::string(*e).rfind(u + "=", 0) == 0;
    if (!drop) env_s.push_back(*e);
  }
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string o = out.string();
  posix_spawn_file_actions_addopen(&fa, 1, o.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

// Polls `ready` every 20 ms until it holds or `timeout` passed. Returns whether it held.
inline bool wait_until(const std::function<bool()>& ready, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Waits for child pid to exit, up to timeout (then SIGKILL and reap). Returns its wait status,
// or -1 if it had to be killed.
inline int wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  int st = 0;
  const bool done = wait_until([&] { return waitpid(pid, &st, WNOHANG) == pid; }, timeout);
  if (done) return st;
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

}  // namespace paco::testing

namespace paco::testing {

// The command line of a small DiPaCo run of paco_train for process-level tests and the chaos
// suite: the Brown config with a tiny GPT (d 32, 2 layers, ctx 64, batch 4, one thread),
// `rounds` rounds of 30 inner steps from a 5-step base model, peer timeout 1 s, the given
// round timeout, no re-routing. `extra` is appended (more --set items, --fresh, --resume).
inline std::vector<std::string> small_dipaco_job(const std::filesystem::path& source_dir,
                                                 const std::filesystem::path& binary_dir,
                                                 const std::filesystem::path& out_dir, int rounds,
                                                 double round_timeout_s,
                                                 const std::vector<std::string>& extra = {}) {
  std::ostringstream rt;
  rt << round_timeout_s;
  std::vector<std::string> a = {
      (binary_dir / "examples" / "paco_train" / "paco_train").string(), "-c",
      (source_dir / "examples" / "configs" / "dipaco_brown.toml").string()};
  for (const std::string& kv :
       {"output.dir=" + out_dir.string(), std::string("model.d=32"), std::string("model.layers=2"),
        std::string("model.heads=2"), std::string("model.ctx=64"), std::string("train.batch=4"),
        std::string("train.threads=1"), "dipaco.rounds=" + std::to_string(rounds),
        std::string("dipaco.inner_steps=30"), std::string("dipaco.pretrain_steps=5"),
        std::string("launch.peer_timeout_s=1"), "launch.round_timeout_s=" + rt.str(),
        std::string("train.warmup=2"), std::string("dipaco.reroute_every=0")}) {
    a.push_back("--set");
    a.push_back(kv);
  }
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace paco::testing

namespace paco::testing {

// The exit code of a wait status: the exit status, 128 + the signal, or -1 (not exited).
inline int exit_code(int st) {
  return st < 0 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

// One number of every record of worker w's log in a paco_train run directory (worker-W.jsonl):
// the value under `key` of each record that has it, in order.
inline std::vector<double> worker_log_values(const std::filesystem::path& dir, int w,
                                             const std::string& key) {
  std::vector<double> out;
  std::ifstream f(dir / ("worker-" + std::to_string(w) + ".jsonl"));
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains(key) && j[key].is_number()) out.push_back(j[key]);
  }
  return out;
}

// What a finished paco_train DiPaCo run left, for benchmarks: per worker (index w − 1) its log's
// round_s and sync_s (every record), its pushes (store::metered's [start_s, end_s, bytes]) and
// how many of them the store merged late (the largest "merged" of its records: a restarted
// worker counts again from 0);
// from store.log the rounds closed by their deadline or by a quorum, the longest a round stayed
// open and the late pushes merged and dropped; from the launcher's output the routed bits/byte and
// the bytes of the results table, and the bytes a data-parallel run of the same steps would send
// per worker.
struct job_report {
  std::vector<std::vector<double>> round_s, sync_s;
  std::vector<std::vector<store::push_record>> pushes;
  double bpb = 0, bytes = 0, dp_bytes_per_worker = 0, max_open_s = 0;
  int deadline_closes = 0, quorum_closes = 0;
  long late = 0, merged = 0;        // late pushes dropped; merged into a later round
  std::vector<long> worker_merged;  // per worker, its log's count of its pushes merged late
};

// The report of the run in `dir` with `workers` workers whose launcher printed `out`. Errors:
// not_found when the output holds no results table (the run did not finish).
inline result<job_report> read_job(const std::filesystem::path& dir, const std::string& out,
                                   int workers) {
  job_report r;
  for (int w = 1; w <= workers; ++w) {
    r.round_s.push_back(worker_log_values(dir, w, "round_s"));
    r.sync_s.push_back(worker_log_values(dir, w, "sync_s"));
    auto& pushes = r.pushes.emplace_back();
    long& merged = r.worker_merged.emplace_back(0);
    std::ifstream f(dir / ("worker-" + std::to_string(w) + ".jsonl"));
    for (std::string line; std::getline(f, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("merged")) merged = std::max(merged, j["merged"].get<long>());
      if (!j.contains("pushes")) continue;
      for (const auto& p : j["pushes"])
        pushes.push_back(
            {p.at(0).get<double>(), p.at(1).get<double>(), p.at(2).get<std::size_t>()});
    }
  }
  // store.log: "module M round R closed with a/b pushes after X s[ (deadline)|( quorum)], …"
  static const std::regex close_re(
      R"(closed with \d+/\d+ pushes after ([0-9.]+) s( \((deadline|quorum)\))?)");
  const std::string log = slurp(dir / "store.log");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), close_re);
       it != std::sregex_iterator(); ++it) {
    r.max_open_s = std::max(r.max_open_s, std::stod((*it)[1]));
    if ((*it)[3] == "deadline") ++r.deadline_closes;
    if ((*it)[3] == "quorum") ++r.quorum_closes;
  }
  std::smatch m;
  static const std::regex late_re(R"((\d+) late pushes merged, (\d+) dropped)");
  if (std::regex_search(log, m, late_re)) r.merged = std::stol(m[1]), r.late = std::stol(m[2]);
  // "| all (routed) |  61 |  3.8265 |  4.217 MB |"
  static const std::regex all_re(
      R"(all \(routed\) *\| *[0-9]+ *\| *([0-9]+\.[0-9]+|-?nan|-?inf) *\| *([0-9.]+) MB)");
  if (!std::regex_search(out, m, all_re))
    return error(errc::not_found, "no results table in the output of the run in " + dir.string());
  r.bpb = std::stod(m[1]);
  r.bytes = std::stod(m[2]) * 1e6;
  static const std::regex dp_re(R"(data-parallel run of the same steps would send ([0-9.]+) MB)");
  if (std::regex_search(out, m, dp_re)) r.dp_bytes_per_worker = std::stod(m[1]) * 1e6;
  return r;
}

// A small DiPaCo run of paco_train in `dir` (small_dipaco_job's settings), for process tests.
struct small_dipaco_run {
  std::filesystem::path source_dir, binary_dir, dir;
  int rounds = 3;
  double round_timeout_s = 10;
  std::vector<std::string> args(const std::vector<std::string>& extra = {}) const {
    return small_dipaco_job(source_dir, binary_dir, dir, rounds, round_timeout_s, extra);
  }
  // The launcher's output file for runs started here.
  std::filesystem::path out() const { return dir.string() + ".out"; }
  // Starts paco_train with extra arguments, its output in out(). Returns the pid, or -1.
  pid_t start(const std::vector<std::string>& extra = {},
              const std::vector<std::string>& env_unset = {}) const {
    return spawn_logged(args(extra), out(), env_unset);
  }
  // Runs paco_train to its end (killed after timeout); returns (exit code, output).
  std::pair<int, std::string> run(
      const std::vector<std::string>& extra = {}, const std::vector<std::string>& env_unset = {},
      std::chrono::milliseconds timeout = std::chrono::milliseconds(180000)) const {
    const pid_t pid = start(extra, env_unset);
    return {exit_code(wait_exit(pid, timeout)), slurp(out())};
  }
};

// A finished run read back (benchmarks): what read_job found, and the run's wall time.
struct finished_run {
  job_report report;
  double wall_s = 0;
};

// Runs `job` to its end from an empty directory with the settings `sets` ("key=value", each
// passed as --set), killed after `timeout`, and reads it back (read_job, `workers` workers);
// then removes its directory and output unless `keep`. Errors: io naming the exit code and the
// output file when the run failed (both kept); read_job's.
inline result<finished_run> run_and_read(const small_dipaco_run& job,
                                         const std::vector<std::string>& sets, int workers,
                                         std::chrono::milliseconds timeout, bool keep) {
  std::filesystem::remove_all(job.dir);
  std::vector<std::string> args;
  for (const auto& kv : sets) args.insert(args.end(), {"--set", kv});
  const auto t0 = std::chrono::steady_clock::now();
  const auto [code, out] = job.run(args, {}, timeout);
  finished_run r;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (code != 0)
    return error(errc::io, "exit " + std::to_string(code) + "; output in " + job.out().string());
  auto rep = read_job(job.dir, out, workers);
  if (!rep) return rep.error();
  r.report = std::move(*rep);
  if (!keep) {
    std::filesystem::remove_all(job.dir);
    std::filesystem::remove(job.out());
  }
  return r;
}

}  // namespace paco::testing
