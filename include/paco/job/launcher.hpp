#pragma once
// The launcher of a DiPaCo job (the program's default role): prepares the run directory (a
// shared base model, the routing of every document), then
//   launch.mode = "local"   starts one store process and one process per worker on this machine
//                           (the program itself, /proc/self/exe, with the job's child_args and a
//                           role), shows a progress line per path, restarts a crashed worker (it
//                           resumes from its checkpoint), and at the end prints the results table
//   launch.mode = "manual"  prints one command per process, for one machine each
// No launcher overwrites a run it did not start: a directory holding one needs --resume (every
// checkpoint verified first) or --fresh. A run directory is locked while its launcher runs.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "paco/io/progress.hpp"
#include "paco/job/data.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/prepare.hpp"
#include "paco/job/results.hpp"
#include "paco/job/run_files.hpp"
#include "paco/job/run_lock.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/free_port.hpp"

extern char** environ;

namespace paco::job {

// A child process of the launcher: its role arguments, pid, and how often it was restarted.
struct child {
  std::string name;
  std::vector<std::string> args;
  pid_t pid = -1;
  int restarts = 0;
  bool done = false;
  int status = 0;
  // A stage of a path that exited (or was stopped) and waits for its worker's other stages to
  // exit, to start again with them (pid −1 meanwhile).
  bool waiting = false;
};

// Quotes the last `n` lines of a failed process's log on stderr (indented), so that the cause
// shows where the launcher reports the failure.
inline void print_log_tail(const fs::path& log, std::size_t n = 8) {
  std::ifstream f(log);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  if (lines.empty()) return;
  std::fprintf(stderr, "  %s ends:\n", log.filename().c_str());
  for (std::size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i)
    std::fprintf(stderr, "    %s\n", lines[i].c_str());
}

// Starts this binary with args, stdout and stderr appended to log, as a child that receives
// SIGKILL when the launcher dies (PR_SET_PDEATHSIG, set between fork and exec). Returns its
// pid, or -1. Between fork and exec the child calls async-signal-safe functions only.
inline pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string log_path = log.string();
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;  // the launcher (or -1)
  const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(125);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve("/proc/self/exe", argv.data(), environ);
  _exit(127);
}

// The signal that asked the launcher to stop (SIGTERM, SIGINT, SIGHUP), or 0.
inline volatile std::sig_atomic_t stop_signal = 0;
inline void on_stop_signal(int sig) {
  stop_signal = sig;
}

// A run's start, the launcher's (or the store rank's): the run directory locked, a previous run
// refused (neither --resume nor --fresh) or verified (--resume), the data loaded, and for a new
// run the directory cleared and prepared (base model, routing; drawn ports when
// launch.base_port is 0). check_tls: the TLS files are checked before anything starts; a local
// launch checks every port it will listen on (check_ports) first too.
struct started_run {
  run_lock lock;
  bool store_resumes = false;  // the store resumes from its checkpoint (else from the base)
  job_data data;
  json routing;
};
template <nn::BlockModel Model>
result<started_run> start_run(const dipaco_job<Model>& cfg, const run_dir& rd, bool resume,
                              bool fresh, bool check_tls) {
  const char* P = cfg.program.c_str();
  const path::path_plan g = make_plan(cfg);
  const job_processes jp = processes_of(cfg, g);
  if (resume && fresh)
    return error(errc::invalid_argument, "--resume and --fresh exclude each other");
  // The lock first: it also proves the run directory writable before anything is trained.
  auto lock = run_lock::acquire(rd.dir, cfg.program);
  if (!lock) return lock.error();
  if (!resume && !fresh) {
    const auto prev = previous_run_files(rd, jp);
    if (!prev.empty())
      return error(errc::invalid_argument,
                   "the run directory '" + rd.dir.string() + "' holds a previous run (" +
                       prev.front().filename().string() +
                       ", ...): pass --resume to continue it or --fresh to delete it and start "
                       "over");
  }
  bool store_resumes = resume;
  if (resume) {
    auto v = verify_resume(cfg, rd, g);
    if (!v) return v.error();
    store_resumes = *v;
    if (!*v) std::printf("%s: no store checkpoint yet: the store starts from the base model\n", P);
  }
  if (check_tls)
    if (auto s = net::asio_tcp::check_tls(link_options(cfg, 1, 0, 1, "").tls); !s)
      return error(s.error().code, "launch.tls: " + s.error().message);
  // Every port the processes started here will listen on, before the data or the base model.
  if (cfg.launch.mode == "local")
    if (auto s = check_ports(cfg, jp, true); !s) return s.error();
  result<job_data> data = load_job_data(cfg);
  if (!data) return data.error();
  std::string grid;
  for (std::size_t i = 0; i < cfg.dipaco.grid.size(); ++i)
    grid += (i ? "x" : "") + std::to_string(cfg.dipaco.grid[i]);
  std::printf(
      "%s: DiPaCo grid %s: %d paths, %d modules, %d workers; %d rounds x %d inner "
      "steps; sync %s; outer %s; pushes %s; corpus %s: %zu training / %zu %s documents\n",
      P, grid.c_str(), g.paths(), g.modules(), g.workers(), cfg.dipaco.rounds,
      cfg.dipaco.inner_steps, cfg.sync.mode.c_str(), cfg.dipaco.outer.c_str(),
      cfg.dipaco.compress.c_str(), cfg.data.corpus.c_str(), data->train.size(), data->val.size(),
      cfg.dipaco.eval_split.c_str());
  if (!resume) {
    std::error_code ec;
    for (int w = 1; w <= g.workers(); ++w) {
      fs::remove(rd.worker_state(w), ec);
      fs::remove(rd.worker_log(w), ec);
    }
    for (int s = 1; s <= jp.count(); ++s) fs::remove(rd.process_log(jp, s), ec);
    for (auto& f : stage_states(rd, jp)) fs::remove(f, ec);
    fs::remove(rd.store(), ec);
    if (auto s = prepare(cfg, rd, *data, g); !s) return s.error();
    if (!cfg.config_record.empty())
      if (auto s = io::write_file_atomic(rd.config_record(), cfg.config_record + "\n"); !s)
        return s.error();
  }
  auto routing = read_routing(rd);
  if (!routing) return routing.error();
  // Ports: one per worker link (per process: a stage of a worker has its own) on the store.
  if (cfg.launch.base_port == 0) {
    std::set<int> ports;
    while (int(ports.size()) < jp.count()) ports.insert(net::free_loopback_port());
    (*routing)["ports"] = std::vector<int>(ports.begin(), ports.end());
    if (auto s = write_routing(rd, *routing); !s) return s.error();
  }
  std::vector<int> per_path(g.paths(), 0);
  for (int r : (*routing)["train_route"].template get<std::vector<int>>()) ++per_path[r];
  std::printf("%s: k-means routing, training documents per path:", P);
  for (int p = 0; p < g.paths(); ++p) std::printf(" %s %d", g.path_name(p).c_str(), per_path[p]);
  std::printf("\n");
  return started_run{std::move(*lock), store_resumes, std::move(*data), std::move(*routing)};
}

template <nn::BlockModel Model>
int run_launcher(const dipaco_job<Model>& cfg, const run_dir& rd, bool resume, bool fresh) {
  const char* P = cfg.program.c_str();
  const path::path_plan g = make_plan(cfg);
  const job_processes jp = processes_of(cfg, g);
  const auto t_start = std::chrono::steady_clock::now();
  // Local runs: TLS files are checked before anything starts (a store or worker that cannot
  // load them would only fail in its log).
  auto run = start_run(cfg, rd, resume, fresh, cfg.launch.mode == "local");
  if (!run) return std::fprintf(stderr, "%s: %s\n", P, run.error().what().c_str()), exit_bad_input;
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  run_phases phases{.prepare_s = since(t_start)};
  const auto t_rounds = std::chrono::steady_clock::now();
  const bool store_resumes = run->store_resumes;
  const job_data* data = &run->data;
  json* routing = &run->routing;
  // With stages, each worker's pipeline: stage k of worker w on pipeline.hosts[k] (loopback when
  // unset or launched here), port pipeline.base_port + s − 1 (a free one when 0 and local).
  std::vector<std::string> stage_peers(std::size_t(g.workers()) + 1);
  std::set<int> taken;  // free ports drawn so far (the store's too): none twice
  if (routing->contains("ports"))
    for (int q : (*routing)["ports"].template get<std::vector<int>>()) taken.insert(q);
  const auto fresh_port = [&] {
    int q = net::free_loopback_port();
    while (taken.count(q)) q = net::free_loopback_port();
    taken.insert(q);
    return q;
  };
  if (jp.staged())
    for (int w = 1; w <= g.workers(); ++w)
      for (int k = 0; k < jp.K; ++k) {
        const std::string host = cfg.pipeline.hosts.empty() || cfg.launch.mode == "local"
                                     ? "127.0.0.1"
                                     : cfg.pipeline.hosts[std::size_t(k)];
        const int base = cfg.pipeline.base_port ? cfg.pipeline.base_port
                                                : (cfg.launch.mode == "manual" ? 29600 : 0);
        const int port = base ? base + jp.id(w, k) - 1 : fresh_port();
        stage_peers[std::size_t(w)] += (k ? "," : "") + host + ":" + std::to_string(port);
      }
  // The arguments of process s's role. A worker continues from its checkpoint (verified, or
  // none); a stage from the newest step all its worker's stages hold (or the start).
  auto process_args = [&](int s) {
    std::vector<std::string> a{"--role", "worker", "--worker", std::to_string(jp.worker_of(s))};
    if (jp.staged())
      a.insert(a.end(), {"--stage", std::to_string(jp.stage_of(s)), "--peers",
                         stage_peers[std::size_t(jp.worker_of(s))]});
    a.push_back("--resume");
    return a;
  };
  std::vector<std::string> common = {cfg.program, "--run-dir", rd.dir.string()};
  common.insert(common.end(), cfg.child_args.begin(), cfg.child_args.end());
  if (cfg.launch.mode == "manual") {
    // Every command resumes: run again after a crash (or to continue), it picks up the
    // process's checkpoint instead of starting over.
    std::printf(
        "\nOn each machine, with PACO_TOKEN set to the same secret and the run directory "
        "%s copied there (each command also continues its process after a crash):\n",
        rd.dir.c_str());
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (auto& x : v) s += (s.empty() ? "" : " ") + x;
      return s;
    };
    auto store_args = common;
    store_args.insert(store_args.end(), {"--role", "store", "--resume"});
    std::printf("  store:    %s\n", join(store_args).c_str());
    for (int s = 1; s <= jp.count(); ++s) {
      auto a = common;
      const auto r = process_args(s);
      a.insert(a.end(), r.begin(), r.end());
      std::printf("  %s: %s\n", jp.name(s).c_str(), join(a).c_str());
    }
    if (jp.staged())
      std::printf(
          "(after a stage crashes, stop its worker's other stages and run all of them again: "
          "they resume from the newest step they all hold)\n");
    return 0;
  }
  if (std::getenv("PACO_TOKEN") == nullptr) setenv("PACO_TOKEN", random_token().c_str(), 1);
  // The children know they are restarted by this process (supervised_by_launcher).
  setenv(supervisor_env, std::to_string(getpid()).c_str(), 1);

  std::vector<child> kids;
  {
    child s{"store", common};
    s.args.insert(s.args.end(), {"--role", "store"});
    if (store_resumes) s.args.push_back("--resume");
    kids.push_back(s);
  }
  for (int s = 1; s <= jp.count(); ++s) {
    child c{jp.name(s), common};
    // Workers and stages always --resume: their checkpoints were verified (or removed for a fresh
    // run), and a restarted one continues from its own.
    const auto r = process_args(s);
    c.args.insert(c.args.end(), r.begin(), r.end());
    kids.push_back(c);
  }
  // From here on a stop signal is forwarded to the children (and they die with the launcher).
  stop_signal = 0;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) std::signal(sig, on_stop_signal);
  // Stops every running child: SIGTERM, then SIGKILL after grace; reaps them all.
  auto stop_all = [&](std::chrono::milliseconds grace) {
    for (auto& k : kids)
      if (!k.done && k.pid > 0) kill(k.pid, SIGTERM);
    const auto until = std::chrono::steady_clock::now() + grace;
    for (auto& k : kids) {
      while (!k.done && k.pid > 0) {
        int st = 0;
        const pid_t r = waitpid(k.pid, &st, WNOHANG);
        if (r == k.pid || (r < 0 && errno == ECHILD)) {
          k.done = true;
          k.status = st;
        } else if (std::chrono::steady_clock::now() > until) {
          kill(k.pid, SIGKILL);
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    }
  };
  for (auto& k : kids) {
    k.pid = spawn(k.args, rd.log(k.name));
    if (k.pid < 0) {
      stop_all(std::chrono::milliseconds(2000));
      return std::fprintf(stderr, "%s: cannot start %s\n", P, k.name.c_str()), 2;
    }
  }
  std::printf(
      "%s: started the store and %d workers%s over TCP on %s (logs in %s)\n", P, g.workers(),
      jp.staged()
          ? (" of " + std::to_string(jp.K) + " stages each (" + pipeline_name(cfg) + ")").c_str()
          : "",
      cfg.launch.store_host.c_str(), rd.dir.c_str());

  if (cfg.launch.metrics_port > 0) {  // where to watch the run (store_role.hpp serves it)
    const http_listen where = http_listen_of(cfg.launch, token_from_env());
    const std::string host = where.token.empty() ? where.host : cfg.launch.store_host;
    std::printf(
        "%s: status page http://%s:%d/ (Prometheus metrics at /metrics; worker w's at "
        "port %d + w)%s\n",
        P, host.c_str(), cfg.launch.metrics_port, cfg.launch.metrics_port,
        where.token.empty() ? "" : "; Authorization: Bearer <the run's PACO_TOKEN>");
  }
  io::progress bar("dipaco rounds", long(cfg.dipaco.rounds) * jp.count());
  bool failed = false;
  std::string last_text;
  // Store restarts so far, and for each child the count when it was last started: a worker
  // that fails after the store restarted (or while the store is down) lost its link to the
  // store, not its own work, and is restarted without using its budget.
  int store_gen = 0;
  std::map<std::string, int> gen_at_start;
  // Workers whose stages are being restarted together, and each worker's restarts so far.
  std::set<int> regroup;
  std::map<int, int> stage_restarts;
  for (auto& k : kids) gen_at_start[k.name] = 0;
  // Since when workers have been failing to reach the store with no round completed anywhere
  // (empty: they are not, or some worker progressed since).
  std::optional<std::chrono::steady_clock::time_point> lost_since;
  long progress = -1;
  // The store exited 0: it finished the run (its checkpoint holds every module's last round).
  const auto store_finished = [&] {
    return kids[0].done && WIFEXITED(kids[0].status) && WEXITSTATUS(kids[0].status) == 0;
  };
  for (;;) {
    if (stop_signal) {
      const int sig = stop_signal;
      std::fprintf(stderr, "\n%s: %s received; stopping the store and the workers\n", P,
                   strsignal(sig));
      stop_all(std::chrono::milliseconds(5000));
      return 128 + sig;
    }
    // Reap children (the store first); restart a process that crashed (it resumes from its
    // checkpoint) unless the run already failed.
    std::vector<std::pair<pid_t, int>> reaped;
    int st = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) reaped.push_back({pid, st});
    std::stable_partition(reaped.begin(), reaped.end(),
                          [&](auto& r) { return r.first == kids[0].pid; });
    for (auto [rpid, rst] : reaped)
      for (auto& k : kids)
        if (k.pid == rpid && !k.done) {
          st = rst;
          const int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
          const bool ok = code == 0;
          const bool is_store = k.name == "store";
          // Bad input and a state that cannot be written stay so however often it restarts.
          const bool permanent = !restartable(code);
          const bool store_down = !is_store && (kids[0].done || store_gen != gen_at_start[k.name]);
          // A worker that lost its link to a live store: the store's fault, not the worker's.
          const bool lost_store = !is_store && code == exit_link_lost && !kids[0].done;
          const bool uncounted = store_down || lost_store;
          // A worker that could not reach a store which finished the run (its rounds closed by
          // deadline without this worker, after it was killed and while it restarted): its part
          // is over, not failed; the store's checkpoint holds the run (check_run_whole).
          if (!is_store && store_finished() && code == exit_link_lost) {
            k.done = true;
            k.status = 0;
            std::fprintf(stderr,
                         "\n%s: %s stopped (exit %d): the store finished the run without it; "
                         "not restarted\n",
                         P, k.name.c_str(), code);
            continue;
          }
          // The silence rule's clock starts when a worker fails for want of a store (not when one
          // exits 0 after the store finished).
          if (uncounted && !ok && !lost_since) lost_since = std::chrono::steady_clock::now();
          // A stage cannot rejoin a pipeline that went on without it: the first of a worker's
          // stages to fail stops the others, and all of them start again together once every one
          // exited (below), resuming from the newest step they all checkpointed. Each such
          // restart of the worker counts once against launch.restarts (not when the store
          // restarted meanwhile).
          if (!is_store && jp.staged() && !failed) {
            const int w = jp.worker_of(int(&k - kids.data()));
            if (ok && !regroup.count(w)) {
              k.done = true;
              k.status = st;
              continue;
            }
            if (!regroup.count(w)) {
              if (permanent || (!store_down && stage_restarts[w] >= cfg.launch.restarts)) {
                k.done = true;
                k.status = st;
                failed = true;
                std::fprintf(stderr, "\n%s: %s failed (%s %d%s), see %s\n", P, k.name.c_str(),
                             WIFSIGNALED(st) ? "signal" : "exit",
                             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                             permanent ? ": bad input, or a state it cannot write"
                                       : ": its worker's restarts are spent",
                             rd.log(k.name).c_str());
                print_log_tail(rd.log(k.name));
                continue;
              }
              if (!store_down) ++stage_restarts[w];
              regroup.insert(w);
              std::fprintf(stderr,
                           "\n%s: %s stopped (%s %d); restarting worker %d's %d stages from their "
                           "newest common checkpoint (%s)\n",
                           P, k.name.c_str(), WIFSIGNALED(st) ? "signal" : "exit",
                           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), w, jp.K,
                           store_down ? "the store restarted: not counted"
                                      : (std::to_string(stage_restarts[w]) + " of " +
                                         std::to_string(cfg.launch.restarts))
                                            .c_str());
              for (int j = 0; j < jp.K; ++j) {
                auto& o = kids[std::size_t(jp.id(w, j))];
                if (&o != &k && !o.done && !o.waiting && o.pid > 0) kill(o.pid, SIGTERM);
              }
            }
            k.waiting = true;
            k.pid = -1;
            continue;
          }
          if (!ok && !failed && !permanent && (uncounted || k.restarts < cfg.launch.restarts)) {
            // A worker resumes from its checkpoint and rejoins; the store resumes from its own.
            if (!uncounted) ++k.restarts;
            std::fprintf(stderr, "\n%s: %s stopped (%s %d); restarting it (%s)\n", P,
                         k.name.c_str(), WIFSIGNALED(st) ? "signal" : "exit",
                         WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                         store_down   ? "the store restarted: not counted"
                         : lost_store ? "it lost its link to the store: not counted"
                                      : (std::to_string(k.restarts) + " of " +
                                         std::to_string(cfg.launch.restarts))
                                            .c_str());
            if (is_store) {
              ++store_gen;
              if (std::find(k.args.begin(), k.args.end(), "--resume") == k.args.end())
                k.args.push_back("--resume");
            }
            gen_at_start[k.name] = store_gen;
            k.pid = spawn(k.args, rd.log(k.name));
          } else {
            k.done = true;
            k.status = st;
            if (!ok) {
              failed = true;
              std::fprintf(stderr, "\n%s: %s failed (%s %d%s), see %s\n", P, k.name.c_str(),
                           WIFSIGNALED(st) ? "signal" : "exit",
                           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                           code == exit_bad_input ? ": bad input, configuration or checkpoint"
                           : code == exit_write_failed
                               ? ": it could not write its checkpoint or log (disk full or "
                                 "read-only?)"
                               : "",
                           rd.log(k.name).c_str());
              print_log_tail(rd.log(k.name));
            }
          }
        }
    // A worker whose stages have all exited starts them again, together.
    for (auto it = regroup.begin(); it != regroup.end() && !failed;) {
      const int w = *it;
      bool down = true;
      for (int j = 0; j < jp.K; ++j) {
        const auto& o = kids[std::size_t(jp.id(w, j))];
        down &= o.waiting || o.done;
      }
      if (!down) {
        ++it;
        continue;
      }
      for (int j = 0; j < jp.K && !failed; ++j) {
        auto& o = kids[std::size_t(jp.id(w, j))];
        o.waiting = o.done = false;
        gen_at_start[o.name] = store_gen;
        o.pid = spawn(o.args, rd.log(o.name));
        if (o.pid < 0)
          failed = true, o.done = true,
          std::fprintf(stderr, "\n%s: cannot start %s again\n", P, o.name.c_str());
      }
      it = regroup.erase(it);
    }
    std::map<int, json> rec = latest_records(rd, jp);
    long done_rounds = 0;
    std::string text;
    // Each path: its round and bits/byte (with stages: every stage's own loss, k0/k1/…).
    auto bpb_of = [&](int s) {
      return rec.count(s) && rec[s]["bpb"].is_number() ? rec[s]["bpb"].template get<double>() : NAN;
    };
    for (int p = 0; p < g.paths(); ++p) {
      long r = 0;
      std::string losses;
      for (int w = 1; w <= g.workers(); ++w) {
        if (g.path_of_worker(w - 1) != p) continue;
        losses.clear();
        for (int k = 0; k < jp.K; ++k) {
          const int s = jp.id(w, k);
          if (rec.count(s)) r = std::max(r, rec[s]["round"].template get<long>() + 1);
          char b[16];
          std::snprintf(b, sizeof b, "%s%.2f", k ? "/" : "", bpb_of(s));
          losses += std::isnan(bpb_of(s)) ? (k ? "/-" : "-") : b;
        }
      }
      text += (p ? " | " : "") + g.path_name(p) + " r" + std::to_string(r) + " " + losses;
    }
    // The time the workers' last rounds spent on the sync (push and wait), and pushes dropped late.
    double sync_s = 0;
    long late = 0;
    int with_sync = 0;
    for (auto& [w, j] : rec) {
      if (j.contains("sync_s")) sync_s += j["sync_s"].template get<double>(), ++with_sync;
      if (j.contains("late")) late += j["late"].template get<long>();
    }
    text += " bpb";
    if (with_sync > 0) {
      char b[48];
      std::snprintf(b, sizeof b, "; sync %.1f s/round", sync_s / with_sync);
      text += b;
      if (late > 0) text += "; " + std::to_string(late) + " late";
    }
    for (auto& [w, j] : rec) done_rounds += j["round"].template get<long>() + 1;
    if (done_rounds != progress) progress = done_rounds, lost_since.reset();
    // Workers keep failing to reach a store that is alive (stopped, hung) or gone, and no round
    // completes: the run fails naming the store instead of restarting workers forever.
    // A store that exited 0 finished the run: a worker still trying to reach it (restarted while
    // the others closed the last rounds) ends by its own connect deadline, and is not a failure.
    if (!failed && lost_since && !store_finished() &&
        std::chrono::steady_clock::now() - *lost_since > store_silence(cfg)) {
      failed = true;
      std::fprintf(stderr,
                   "\n%s: no worker has reached the store for %.0f s and no round "
                   "completed: the store (pid %d) is %s; stopping the run (see %s)\n",
                   P, store_silence(cfg).count(), int(kids[0].pid),
                   kids[0].done ? "gone" : "alive but not answering (stopped or hung?)",
                   rd.log("store").c_str());
    }
    if (text != last_text) {  // one line per change (rounds are minutes apart)
      bar.update(std::min(done_rounds, long(cfg.dipaco.rounds) * jp.count()), text);
      last_text = text;
    }
    bool all = true;
    for (auto& k : kids) all &= k.done || (failed && k.waiting);
    if (all) break;
    if (failed) stop_all(std::chrono::milliseconds(5000));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  // Every process done: the bar's last line (a round a restarted worker's log lacks, closed
  // without it, never counted; a short run's lines all fell between two log lines).
  if (!failed && !stop_signal)
    bar.update(long(cfg.dipaco.rounds) * jp.count(), last_text);
  else
    bar.finish();
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) std::signal(sig, SIG_DFL);  // no child left to stop
  if (stop_signal) return 128 + stop_signal;
  if (failed) {
    std::fprintf(stderr, "%s: a process failed; see the logs in %s\n", P, rd.dir.c_str());
    return 3;
  }
  // Every process said it is done; the table is computed only from a whole run.
  if (auto s = check_run_whole(cfg, rd, g); !s)
    return std::fprintf(stderr, "%s: the run is not whole: %s\n", P, s.error().what().c_str()), 3;
  phases.rounds_s = since(t_rounds);
  return print_results(cfg, rd, g, *data, *routing, phases);
}

}  // namespace paco::job
