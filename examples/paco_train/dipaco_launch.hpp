#pragma once
// The launcher of paco_train's DiPaCo job: prepare, spawn, monitor, evaluate, report.
//
// Nothing of a run outlives its launcher and no run is overwritten by accident:
//   - the run directory is locked (flock on run.lock, which holds the launcher's pid) while a
//     launcher works in it; a second launcher refuses, naming the holder's pid;
//   - a directory that holds a previous run is continued only with --resume and deleted only
//     with --fresh; without either the launcher refuses;
//   - with --resume every checkpoint is verified first (checksum, configuration); a missing or
//     damaged one is an error naming the file, never a silent start from scratch;
//   - children get a parent-death signal (SIGKILL when the launcher dies, even by kill -9), and
//     SIGTERM / SIGINT / SIGHUP to the launcher are forwarded to them before it exits;
//   - a worker that fails because the store went down, or lost its link to a live store (exit 3),
//     is restarted without using its restart budget; when no worker has reached a live store
//     for store_silence() the run fails naming the store (stopped or hung), never a worker;
//   - a process that failed on bad input (exit 2) or could not write its state (exit 4) is not
//     restarted; once a process failed for good, the others are stopped and never restarted;
//   - the run ends with exit 0 only if it is whole: every process exited 0 and every module of
//     the store's checkpoint is at the last round; the results table is computed only then,
//     never from an older state.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/prctl.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <set>
#include <utility>

#include "dipaco_job.hpp"
#include "paco/io/table.hpp"
#include "paco/net/free_port.hpp"

namespace paco_train {

// A child process of the launcher: its role arguments, pid, and how often it was restarted.
struct child {
  std::string name;
  std::vector<std::string> args;
  pid_t pid = -1;
  int restarts = 0;
  bool done = false;
  int status = 0;
};

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

// The lock of a run directory: flock on dir/run.lock, which holds the holder's pid. Released
// when the launcher exits (however it exits: the kernel drops the lock with the descriptor).
class run_lock {
 public:
  // Errors: io naming the pid of the launcher that holds it; io if the directory cannot be
  // created or written (checked here, before anything is trained).
  static result<run_lock> acquire(const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      return error(errc::io,
                   "cannot create the run directory '" + dir.string() + "': " + ec.message());
    const fs::path file = dir / "run.lock";
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
      std::string holder = n > 0 ? std::string(b, std::size_t(n)) : "unknown";
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      return error(errc::io, "the run directory '" + dir.string() +
                                 "' is in use by another paco_train launcher (pid " + holder +
                                 ", lock " + file.string() + ")");
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

// The signal that asked the launcher to stop (SIGTERM, SIGINT, SIGHUP), or 0.
inline volatile std::sig_atomic_t stop_signal = 0;
inline void on_stop_signal(int sig) {
  stop_signal = sig;
}

// Which files of a previous run the directory holds (empty: none).
inline std::vector<fs::path> previous_run_files(const run_dir& rd, const job_processes& jp) {
  std::vector<fs::path> out;
  for (auto& f : {rd.routing(), rd.base(), rd.store()})
    if (fs::exists(f)) out.push_back(f);
  for (int w = 1; w <= jp.workers; ++w)
    for (auto& f : {rd.worker_state(w), rd.worker_log(w)})
      if (fs::exists(f)) out.push_back(f);
  for (int s = 1; s <= jp.count(); ++s)
    if (fs::exists(rd.process_log(jp, s)) && rd.process_log(jp, s) != rd.worker_log(s))
      out.push_back(rd.process_log(jp, s));
  return out;
}

// --resume: every checkpoint a resumed run would read is verified (present where it must be,
// complete, checksum, configuration, run id, worker and path; routing.json's checksum), and the
// store must not be behind the workers. Returns whether a store checkpoint exists (without one
// and without any worker checkpoint the store starts from the base model: nothing was trained).
inline result<bool> verify_resume(const train_config& cfg, const run_dir& rd,
                                  const path::path_plan& g) {
  for (auto& f : {rd.routing(), rd.base()})
    if (!fs::exists(f))
      return error(errc::not_found, "--resume: '" + f.string() +
                                        "' is missing (nothing to resume: run with --fresh)");
  auto routing = read_routing(rd);
  if (!routing) return error(routing.error().code, "--resume: " + routing.error().message);
  nn::gpt model(cfg.model);
  arena<host> a(model.layout());
  if (auto s = load_base(cfg, rd, model, a); !s)
    return error(s.error().code, "--resume: " + s.error().message);
  const auto completed = completed_rounds(cfg, rd, *routing, g);
  if (!completed) return error(completed.error().code, "--resume: " + completed.error().message);
  const bool any_worker =
      std::any_of(completed->begin(), completed->end(), [](long r) { return r >= 0; });
  if (!fs::exists(rd.store())) {
    if (any_worker)
      return error(errc::not_found, "--resume: the store checkpoint '" + rd.store().string() +
                                        "' is missing while workers have checkpoints");
    return false;
  }
  store::module_store<store_outer> store(g.module_table(), outer_of(cfg));
  if (auto s = load_store(cfg, rd, g, store); !s)
    return error(s.error().code, "--resume: " + s.error().message);
  if (auto s = check_store_not_behind(rd, g, store, *completed); !s)
    return error(s.error().code, "--resume: " + s.error().message);
  return true;
}

// Whether a finished run is whole: every module of the store's checkpoint at the last round
// (every process also exited 0: none failed a checkpoint or log write). Errors name the module.
inline status check_run_whole(const train_config& cfg, const run_dir& rd,
                              const path::path_plan& g) {
  store::module_store<store_outer> store(g.module_table(), outer_of(cfg));
  if (auto s = load_store(cfg, rd, g, store); !s) return s;
  for (int m = 0; m < g.modules(); ++m)
    if (store.round(m) != cfg.dipaco.rounds)
      return {errc::mismatch, "the store checkpoint '" + rd.store().string() + "' holds module " +
                                  std::to_string(m) + " at round " +
                                  std::to_string(store.round(m)) + ", not the last round " +
                                  std::to_string(cfg.dipaco.rounds)};
  return {};
}

// How long the launcher lets workers fail to reach a live store before it blames the store.
inline std::chrono::duration<double> store_silence(const train_config& cfg) {
  return std::chrono::duration<double>(
      std::max({60.0, 2 * cfg.launch.round_timeout_s, 10 * cfg.launch.peer_timeout_s}));
}

// The last record of each process's JSONL log (job_processes: a worker, or a stage of one).
inline std::map<int, json> latest_records(const run_dir& rd, const job_processes& jp) {
  std::map<int, json> out;
  for (int w = 1; w <= jp.count(); ++w) {
    std::ifstream in(rd.process_log(jp, w));
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    if (!last.empty()) {
      json j = json::parse(last, nullptr, false);
      if (!j.is_discarded()) out[w] = j;
    }
  }
  return out;
}

// Loss curves per path to a PNG with gnuplot (skipped with a message when gnuplot is missing).
// With stages, each worker's last stage (the path's own loss).
inline std::string plot_curves(const run_dir& rd, const path::path_plan& g,
                               const job_processes& jp) {
  const fs::path data = rd.dir / "loss_curves.dat", png = rd.dir / "loss_curves.png";
  std::ofstream out(data);
  for (int w = 1; w <= g.workers(); ++w) {
    out << "# worker " << w << "\n";
    std::ifstream in(rd.process_log(jp, jp.id(w, jp.K - 1)));
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.contains("round") && j["bpb"].is_number())
        out << j["step"] << " " << j["bpb"] << "\n";
    }
    out << "\n\n";
  }
  out.close();
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return "(gnuplot not installed)";
  std::ofstream gp(rd.dir / "loss_curves.gp");
  gp << "set terminal png size 900,560\nset output '" << png.string() << "'\n"
     << "set title 'DiPaCo " << g.paths() << " paths: training loss per path'\n"
     << "set xlabel 'inner step'\nset ylabel 'bits per byte'\nset grid\nplot ";
  for (int w = 1; w <= g.workers(); ++w)
    gp << (w > 1 ? ", " : "") << "'" << data.string() << "' index " << (w - 1)
       << " with linespoints title 'worker " << w << " path "
       << g.path_name(g.path_of_worker(w - 1)) << "'";
  gp << "\n";
  gp.close();
  const std::string cmd = "gnuplot '" + (rd.dir / "loss_curves.gp").string() + "' 2>/dev/null";
  return std::system(cmd.c_str()) == 0 ? png.string() : "(gnuplot failed)";
}

// How the stages of a path train (dipaco.stages > 1), for the launcher's lines.
inline std::string pipeline_name(const train_config& cfg) {
  const auto& p = cfg.pipeline;
  if (p.schedule == "local")
    return "local losses, head " + p.head + ", queue " + std::to_string(p.queue_depth) +
           ", activations " + p.activations;
  return p.schedule + ", M = " + std::to_string(p.micro_batches) + " micro-batches, activations " +
         p.activations;
}

inline int run_launcher(const train_config& cfg, const run_dir& rd, const std::string& config_path,
                        const std::vector<std::string>& overrides, bool resume, bool fresh) {
  const auto g = make_plan(cfg);
  const auto jp = processes_of(cfg, g);
  const auto t_start = std::chrono::steady_clock::now();
  if (resume && fresh)
    return std::fprintf(stderr, "paco_train: --resume and --fresh exclude each other\n"), 2;
  // The lock first: it also proves the run directory writable before anything is trained.
  auto lock = run_lock::acquire(rd.dir);
  if (!lock) return std::fprintf(stderr, "paco_train: %s\n", lock.error().what().c_str()), 2;
  if (!resume && !fresh) {
    const auto prev = previous_run_files(rd, jp);
    if (!prev.empty())
      return std::fprintf(stderr,
                          "paco_train: the run directory '%s' holds a previous run (%s, ...): pass "
                          "--resume to continue it or --fresh to delete it and start over\n",
                          rd.dir.c_str(), prev.front().filename().c_str()),
             2;
  }
  if (resume && jp.staged())
    return std::fprintf(stderr,
                        "paco_train: --resume: the stages of a path keep no checkpoints "
                        "(dipaco.stages = %d): start the run over with --fresh\n",
                        jp.K),
           2;
  bool store_resumes = resume;
  if (resume) {
    auto v = verify_resume(cfg, rd, g);
    if (!v) return std::fprintf(stderr, "paco_train: %s\n", v.error().what().c_str()), 2;
    store_resumes = *v;
    if (!*v)
      std::printf("paco_train: no store checkpoint yet: the store starts from the base model\n");
  }
  // Local runs: TLS files are checked here, before anything starts (a store or worker that
  // cannot load them would only fail in its log).
  if (cfg.launch.mode == "local")
    if (auto s = net::asio_tcp::check_tls(link_options(cfg, 1, 0, 1, "").tls); !s)
      return std::fprintf(stderr, "paco_train: launch.tls: %s\n", s.error().what().c_str()), 2;
  auto data = load_job_data(cfg);
  if (!data) return std::fprintf(stderr, "paco_train: %s\n", data.error().what().c_str()), 2;
  std::printf(
      "paco_train: DiPaCo grid %s: %d paths, %d modules, %d workers; %d rounds x %d inner "
      "steps; sync %s; outer %s; pushes %s; Brown: %zu training / %zu %s documents\n",
      [&] {
        std::string s;
        for (std::size_t i = 0; i < cfg.dipaco.grid.size(); ++i) {
          if (i) s += 'x';
          s += std::to_string(cfg.dipaco.grid[i]);
        }
        return s;
      }()
          .c_str(),
      g.paths(), g.modules(), g.workers(), cfg.dipaco.rounds, cfg.dipaco.inner_steps,
      cfg.sync.mode.c_str(), cfg.dipaco.outer.c_str(), cfg.dipaco.compress.c_str(),
      data->train.size(), data->val.size(), cfg.dipaco.eval_split.c_str());
  if (!resume) {
    std::error_code ec;
    for (int w = 1; w <= g.workers(); ++w) {
      fs::remove(rd.worker_state(w), ec);
      fs::remove(rd.worker_log(w), ec);
    }
    for (int s = 1; s <= jp.count(); ++s) fs::remove(rd.process_log(jp, s), ec);
    fs::remove(rd.store(), ec);
    if (auto s = prepare(cfg, rd, *data, g); !s)
      return std::fprintf(stderr, "paco_train: %s\n", s.error().what().c_str()), 2;
  }
  auto routing = read_routing(rd);
  if (!routing) return std::fprintf(stderr, "paco_train: %s\n", routing.error().what().c_str()), 2;
  // Ports: one per worker link (per process: a stage of a worker has its own) on the store.
  if (cfg.launch.base_port == 0) {
    std::set<int> ports;
    while (int(ports.size()) < jp.count()) ports.insert(net::free_loopback_port());
    (*routing)["ports"] = std::vector<int>(ports.begin(), ports.end());
    if (auto s = write_routing(rd, *routing); !s)
      return std::fprintf(stderr, "paco_train: %s\n", s.error().what().c_str()), 2;
  }
  std::vector<int> per_path(g.paths(), 0);
  for (int r : (*routing)["train_route"].get<std::vector<int>>()) ++per_path[r];
  std::printf("paco_train: k-means routing, training documents per path:");
  for (int p = 0; p < g.paths(); ++p) std::printf(" %s %d", g.path_name(p).c_str(), per_path[p]);
  std::printf("\n");

  // With stages, each worker's pipeline: stage k of worker w on pipeline.hosts[k] (loopback when
  // unset or launched here), port pipeline.base_port + s − 1 (a free one when 0 and local).
  std::vector<std::string> stage_peers(std::size_t(g.workers()) + 1);
  std::set<int> taken;  // free ports drawn so far (the store's too): none twice
  if (routing->contains("ports"))
    for (int q : (*routing)["ports"].get<std::vector<int>>()) taken.insert(q);
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
  // The arguments of process s's role.
  auto process_args = [&](int s) {
    std::vector<std::string> a{"--role", "worker", "--worker", std::to_string(jp.worker_of(s))};
    if (jp.staged())
      a.insert(a.end(), {"--stage", std::to_string(jp.stage_of(s)), "--peers",
                         stage_peers[std::size_t(jp.worker_of(s))]});
    else
      a.push_back("--resume");  // a worker continues from its checkpoint (verified, or none)
    return a;
  };
  std::vector<std::string> common = {"paco_train", "--run-dir", rd.dir.string()};
  if (!config_path.empty()) common.insert(common.end(), {"--config", config_path});
  for (auto& o : overrides) common.insert(common.end(), {"--set", o});
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
      std::printf("(the stages keep no checkpoints: after a crash start the run over)\n");
    return 0;
  }
  if (std::getenv("PACO_TOKEN") == nullptr) setenv("PACO_TOKEN", random_token().c_str(), 1);

  std::vector<child> kids;
  {
    child s{"store", common};
    s.args.insert(s.args.end(), {"--role", "store"});
    if (store_resumes) s.args.push_back("--resume");
    kids.push_back(s);
  }
  for (int s = 1; s <= jp.count(); ++s) {
    child c{jp.name(s), common};
    // Workers always --resume: their checkpoints were verified (or removed for a fresh run), and
    // a restarted worker continues from its own. Stages keep none.
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
      return std::fprintf(stderr, "paco_train: cannot start %s\n", k.name.c_str()), 2;
    }
  }
  std::printf(
      "paco_train: started the store and %d workers%s over TCP on %s (logs in %s)\n", g.workers(),
      jp.staged()
          ? (" of " + std::to_string(jp.K) + " stages each (" + pipeline_name(cfg) + ")").c_str()
          : "",
      cfg.launch.store_host.c_str(), rd.dir.c_str());

  io::progress bar("dipaco rounds", long(cfg.dipaco.rounds) * jp.count());
  bool failed = false;
  std::string last_text;
  // Store restarts so far, and for each child the count when it was last started: a worker
  // that fails after the store restarted (or while the store is down) lost its link to the
  // store, not its own work, and is restarted without using its budget.
  int store_gen = 0;
  std::map<std::string, int> gen_at_start;
  for (auto& k : kids) gen_at_start[k.name] = 0;
  // Since when workers have been failing to reach the store with no round completed anywhere
  // (empty: they are not, or some worker progressed since).
  std::optional<std::chrono::steady_clock::time_point> lost_since;
  long progress = -1;
  for (;;) {
    if (stop_signal) {
      const int sig = stop_signal;
      std::fprintf(stderr, "\npaco_train: %s received; stopping the store and the workers\n",
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
          // Bad input and a state that cannot be written stay so however often it restarts; a
          // stage cannot rejoin a pipeline that went on without it (nor its stages a new store).
          const bool permanent = code == exit_bad_input || code == exit_write_failed || jp.staged();
          const bool store_down = !is_store && (kids[0].done || store_gen != gen_at_start[k.name]);
          // A worker that lost its link to a live store: the store's fault, not the worker's.
          const bool lost_store = !is_store && code == exit_link_lost && !kids[0].done;
          const bool uncounted = store_down || lost_store;
          if (uncounted && !lost_since) lost_since = std::chrono::steady_clock::now();
          if (!ok && !failed && !permanent && (uncounted || k.restarts < cfg.launch.restarts)) {
            // A worker resumes from its checkpoint and rejoins; the store resumes from its own.
            if (!uncounted) ++k.restarts;
            std::fprintf(stderr, "\npaco_train: %s stopped (%s %d); restarting it (%s)\n",
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
              std::fprintf(stderr, "\npaco_train: %s failed (%s %d%s), see %s\n", k.name.c_str(),
                           WIFSIGNALED(st) ? "signal" : "exit",
                           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                           code == exit_bad_input ? ": bad input, configuration or checkpoint"
                           : code == exit_write_failed
                               ? ": it could not write its checkpoint or log (disk full or "
                                 "read-only?)"
                               : "",
                           rd.log(k.name).c_str());
            }
          }
        }
    auto rec = latest_records(rd, jp);
    long done_rounds = 0;
    std::string text;
    // Each path: its round and bits/byte (with stages: every stage's own loss, k0/k1/…).
    auto bpb_of = [&](int s) {
      return rec.count(s) && rec[s]["bpb"].is_number() ? rec[s]["bpb"].get<double>() : NAN;
    };
    for (int p = 0; p < g.paths(); ++p) {
      long r = 0;
      std::string losses;
      for (int w = 1; w <= g.workers(); ++w) {
        if (g.path_of_worker(w - 1) != p) continue;
        losses.clear();
        for (int k = 0; k < jp.K; ++k) {
          const int s = jp.id(w, k);
          if (rec.count(s)) r = std::max(r, rec[s]["round"].get<long>() + 1);
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
      if (j.contains("sync_s")) sync_s += j["sync_s"].get<double>(), ++with_sync;
      if (j.contains("late")) late += j["late"].get<long>();
    }
    text += " bpb";
    if (with_sync > 0) {
      char b[48];
      std::snprintf(b, sizeof b, "; sync %.1f s/round", sync_s / with_sync);
      text += b;
      if (late > 0) text += "; " + std::to_string(late) + " late";
    }
    for (auto& [w, j] : rec) done_rounds += j["round"].get<long>() + 1;
    if (done_rounds != progress) progress = done_rounds, lost_since.reset();
    // Workers keep failing to reach a store that is alive (stopped, hung) or gone, and no round
    // completes: the run fails naming the store instead of restarting workers forever.
    if (!failed && lost_since &&
        std::chrono::steady_clock::now() - *lost_since > store_silence(cfg)) {
      failed = true;
      std::fprintf(stderr,
                   "\npaco_train: no worker has reached the store for %.0f s and no round "
                   "completed: the store (pid %d) is %s; stopping the run (see %s)\n",
                   store_silence(cfg).count(), int(kids[0].pid),
                   kids[0].done ? "gone" : "alive but not answering (stopped or hung?)",
                   rd.log("store").c_str());
    }
    if (text != last_text) {  // one line per change (rounds are minutes apart)
      bar.update(std::min(done_rounds, long(cfg.dipaco.rounds) * jp.count()), text);
      last_text = text;
    }
    bool all = true;
    for (auto& k : kids) all &= k.done;
    if (all) break;
    if (failed) stop_all(std::chrono::milliseconds(5000));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  bar.finish();
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) std::signal(sig, SIG_DFL);  // no child left to stop
  if (stop_signal) return 128 + stop_signal;
  if (failed) {
    std::fprintf(stderr, "paco_train: a process failed; see the logs in %s\n", rd.dir.c_str());
    return 3;
  }
  // Every process said it is done; the table is computed only from a whole run.
  if (auto s = check_run_whole(cfg, rd, g); !s)
    return std::fprintf(stderr, "paco_train: the run is not whole: %s\n", s.error().what().c_str()),
           3;
  const double train_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  // ---- evaluation: every path on the documents of dipaco.eval_split routed to it ----
  const std::string split = cfg.dipaco.eval_split;
  const std::string tag = split == "test" ? "test" : "val";
  std::printf("paco_train: evaluating every path on its routed %s documents...\n", split.c_str());
  nn::gpt model(cfg.model);
  store::module_store<store_outer> store(g.module_table(), outer_of(cfg));
  if (auto s = load_store(cfg, rd, g, store); !s)
    return std::fprintf(stderr, "paco_train: %s\n", s.error().what().c_str()), 2;
  auto val_route = (*routing)["val_route"].get<std::vector<int>>();
  // The one scorer (route/evaluate.hpp): every figure below gives every token the same context.
  const auto rule = route::sliding_window::make(cfg.model.ctx).value_or_throw();
  auto ws = model.make_workspace({cfg.train.batch, cfg.model.ctx});
  std::vector<arena<host>> thetas;  // every path's parameters after the final outer step
  std::vector<const float*> th;
  for (int p = 0; p < g.paths(); ++p) {
    auto& a = thetas.emplace_back(model.layout());
    for (int m : g.path_modules(p)) {
      const auto& sp = g.span_of(m);
      store.pull(m, std::span<float>(a.get(plane::param).data() + sp.offset, sp.size));
    }
  }
  for (auto& a : thetas) th.push_back(a.get(plane::param).data());
  std::vector<route::scored_span> spans;
  std::vector<int> routed;
  for (std::size_t i = 0; i < data->val.size(); ++i)
    if (data->val[i].size() > std::size_t(cfg.dipaco.prefix) + 1) {
      spans.push_back({data->val[i], std::size_t(cfg.dipaco.prefix), data->val[i].size()});
      routed.push_back(val_route[i]);
    }
  std::vector<route::nll> per(g.paths());
  std::vector<int> docs(g.paths(), 0);
  route::nll total;
  for (int p = 0; p < g.paths(); ++p) {
    std::vector<route::scored_span> mine;
    for (std::size_t j = 0; j < spans.size(); ++j)
      if (routed[j] == p) mine.push_back(spans[j]), ++docs[p];
    per[p] = route::routed_nll(model, std::span(th).subspan(std::size_t(p), 1), mine,
                               std::vector<int>(mine.size(), 0), rule, ws);
    total += per[p];
  }
  // Frequent re-routing (DiPaCo Table 3): the same documents and bytes, each chunk of
  // reroute_every bytes scored by the path that best predicted the previous chunk.
  route::nll rerouted;
  const std::size_t W = std::size_t(cfg.dipaco.reroute_every);
  if (W > 0 && g.paths() > 1) {
    std::printf(
        "paco_train: re-routing every %zu bytes by likelihood (%d paths score each chunk)...\n", W,
        g.paths());
    rerouted = route::likelihood_rerouted_nll(model, th, spans, W, rule, ws);
  }
  auto rec = latest_records(rd, jp);
  double bytes = 0;
  for (auto& [w, j] : rec) bytes += j["bytes_sent"].get<double>();
  const std::size_t P = model.param_count();
  const long steps = long(cfg.dipaco.rounds) * cfg.dipaco.inner_steps;
  const double dp =
      double(steps) * 2.0 * (g.workers() - 1) / std::max(g.workers(), 1) * double(P) * 4.0;
  const std::string png = plot_curves(rd, g, jp);

  // What fp32 pushes of the same rounds would have sent (request header + 4 bytes per float).
  const auto comp = compression_of(cfg);
  double fp32_bytes = 0;
  for (int w = 1; w <= g.workers(); ++w)
    for (int m : g.worker_modules(w - 1))
      fp32_bytes +=
          double(cfg.dipaco.rounds) * double(store::wire::push_bytes(4 * g.span_of(m).size));
  io::table table({"path", tag + " docs", tag + " bits/byte", "sent (" + comp.name() + ")"});
  for (int p = 0; p < g.paths(); ++p) {
    double b = 0;
    for (auto& [s, j] : rec)
      if (g.path_of_worker(jp.worker_of(s) - 1) == p) b += j["bytes_sent"].get<double>();
    table.add({g.path_name(p), std::to_string(docs[p]), io::cell(per[p].bits_per_token(), 4),
               io::cell(b / 1e6, 3, " MB")});
  }
  // The documents scored: those longer than the routing prefix (the others have nothing to score).
  table.add({"all (routed)", std::to_string(spans.size()), io::cell(total.bits_per_token(), 4),
             io::cell(bytes / 1e6, 3, " MB")});
  if (rerouted.tokens)
    table.add({"re-routed/" + std::to_string(W), std::to_string(spans.size()),
               io::cell(rerouted.bits_per_token(), 4), ""});
  std::printf("\n");
  table.print(stdout);
  std::printf("(scorer %s; routed: each document by its first %d bytes, scored on the rest",
              rule.name().c_str(), cfg.dipaco.prefix);
  if (rerouted.tokens)
    std::printf(
        "; re-routed/%zu: the same bytes, each chunk of %zu scored by the path that best "
        "predicted the previous one",
        W, W);
  std::printf(")\n");
  std::printf(
      "\nper-path model %.2fM parameters, %d modules of %.2fM; %ld inner steps per worker; "
      "%.0f s in all\n",
      P / 1e6, g.modules(), g.level(0).size / 1e6, steps, train_s);
  std::printf(
      "codec %s%s: bytes sent per worker %.3f MB (payloads and request headers, as "
      "sent); fp32 pushes would send %.2f MB (%.2fx more)\n",
      comp.name().c_str(),
      comp.spec.kind == compress::codec_kind::identity ? ""
      : comp.spec.error_feedback                       ? " with error feedback"
                                                       : " without error feedback",
      bytes / g.workers() / 1e6, fp32_bytes / g.workers() / 1e6, fp32_bytes / std::max(bytes, 1.0));
  std::printf("a data-parallel run of the same steps would send %.1f MB per worker (%.0fx more)\n",
              dp / 1e6, dp / std::max(bytes / g.workers(), 1.0));
  if (jp.staged()) {
    // Each stage's own loss in its last round, and what crossed between the stages.
    double act = 0;
    std::string stages;
    for (int k = 0; k < jp.K; ++k) {
      double sum = 0;
      int n = 0;
      for (auto& [s, j] : rec)
        if (jp.stage_of(s) == k && j["bpb"].is_number()) sum += j["bpb"].get<double>(), ++n;
      char b[64];
      std::snprintf(b, sizeof b, "%sstage %d %s", k ? ", " : "", k, n ? "" : "-");
      stages += b;
      if (n) {
        std::snprintf(b, sizeof b, "%.3f", sum / n);
        stages += b;
      }
    }
    for (auto& [s, j] : rec)
      if (j.contains("activation_bytes")) act += j["activation_bytes"].get<double>();
    std::printf(
        "paths cut into %d stages (%s): training bits/byte of the last round %s (stages before "
        "the last: their auxiliary heads'); %.1f MB of activations between stages per worker\n",
        jp.K, pipeline_name(cfg).c_str(), stages.c_str(), act / g.workers() / 1e6);
  }
  std::printf("loss curves: %s; store checkpoint: %s\n", png.c_str(), rd.store().c_str());
  return 0;
}

}  // namespace paco_train
