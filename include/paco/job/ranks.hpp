#pragma once
// launch.mode = "mpi": a DiPaCo job started by an existing engine, every process the same
// command, e.g.
//   mpirun -np 5 paco_train -c job.toml --set launch.mode=mpi
//   srun --ntasks 5 paco_train -c job.toml --set launch.mode=mpi
// Each process takes its role from its rank (net::rank_from_env: Open MPI, PMI, Slurm,
// torchrun-style or paco's own variables): rank 0 is the store, and the launcher's share of the
// work (the run directory's lock, checks, base model and routing, then the results table from
// its checkpoint); rank s ≥ 1 is the job's worker process s. No MPI library is linked: the
// ranks talk over the job's TCP links, the engine only starts them.
//
//   - The ranks meet first (job/engine_meeting.hpp) at the rendezvous (PACO_COORDINATOR or
//     MASTER_ADDR:MASTER_PORT, else 127.0.0.1:29399): rank 0 checks the launch and every rank
//     gets its verdict, so a world that is not 1 + the job's worker processes, or a rank started
//     twice, is an error on every rank; a rank whose job's fingerprint differs from rank 0's is
//     refused, naming both.
//   - The store listens on launch.base_port + s (29400 + s when it is 0) on launch.store_host,
//     or on the host of the rendezvous variable (PACO_COORDINATOR, MASTER_ADDR) when one is set;
//     every rank needs the same PACO_TOKEN (mpirun -x PACO_TOKEN; srun passes the environment).
//   - Workers take the run's routing from the store once it serves (job/worker_role.hpp:
//     from_store), so their run directories may be empty (one per node). A program that reads a
//     configuration reads it on rank 0 only and shares it at a meeting of its own before it
//     builds the job (job::launch_configuration; paco_train does): ranks > 0 need no file.
//   - A rank that fails exits non-zero, which makes the engine stop the others (mpirun's and
//     srun's default): a worker that loses the store exits 3, the store whose workers vanish
//     closes their rounds by deadline and then stops.
// Staged paths (dipaco.stages > 1) are launched by the job's own launcher only.

#include <chrono>
#include <cstdio>
#include <string>

#include "paco/job/dipaco_job.hpp"
#include "paco/job/engine_meeting.hpp"
#include "paco/job/launcher.hpp"
#include "paco/job/results.hpp"
#include "paco/job/run_files.hpp"
#include "paco/job/store_role.hpp"
#include "paco/job/worker_role.hpp"
#include "paco/net/launch_env.hpp"

namespace paco::job {

// The store's port base of a ranks launch.
constexpr int default_rank_base_port = 29400;

// This process's part of a ranks launch. Returns its exit code (job/dipaco_job.hpp): rank 0's is
// the run's (0 only for a whole run with its table printed).
template <nn::BlockModel Model>
int run_ranks(const dipaco_job<Model>& job, const run_dir& rd, bool resume, bool fresh) {
  const char* P = job.program.c_str();
  auto who = net::rank_from_env();
  if (!who) return std::fprintf(stderr, "%s: %s\n", P, who.error().what().c_str()), exit_bad_input;
  if (!*who)
    return std::fprintf(stderr,
                        "%s: launch.mode = \"mpi\": no rank in the environment (start every "
                        "process with mpirun, srun, or PACO_RANK / PACO_WORLD_SIZE)\n",
                        P),
           exit_bad_input;
  dipaco_job<Model> cfg = job;
  if (cfg.launch.base_port == 0) cfg.launch.base_port = default_rank_base_port;
  const path::path_plan g = make_plan(cfg);
  const job_processes jp = processes_of(cfg, g);
  const int rank = (*who)->rank, size = (*who)->size;
  // What rank 0 checks of the launch; its verdict reaches every rank (meet_ranks).
  const auto check_launch = [&]() -> status {
    if (jp.staged())
      return {errc::invalid_argument,
              "launch.mode = \"mpi\" runs paths whole (dipaco.stages = " + std::to_string(jp.K) +
                  ": use launch.mode = \"local\" or \"manual\")"};
    if (size != 1 + jp.count())
      return {errc::invalid_argument, std::to_string(size) + " ranks were started, the job needs " +
                                          std::to_string(1 + jp.count()) +
                                          ": the store (rank 0) and " + std::to_string(jp.count()) +
                                          " workers (grid " + g.describe() + ", " +
                                          std::to_string(g.workers_per_path()) + " per path)"};
    return {};
  };
  if (size == 1)  // no other rank to tell
    if (auto s = check_launch(); !s)
      return std::fprintf(stderr, "%s: rank 0: %s\n", P, s.error().what().c_str()), exit_bad_input;
  if (auto s = require_token(rank == 0 ? "store" : "worker"); !s)
    return std::fprintf(stderr,
                        "%s: rank %d: %s (every rank needs the same one: mpirun -x "
                        "PACO_TOKEN)\n",
                        P, rank, s.error().what().c_str()),
           exit_bad_input;
  auto rendezvous = net::coordinator_from_env();
  if (!rendezvous)
    return std::fprintf(stderr, "%s: %s\n", P, rendezvous.error().what().c_str()), exit_bad_input;
  std::string host;
  if (*rendezvous) host = (*rendezvous)->substr(0, (*rendezvous)->rfind(':'));
  if (!host.empty()) {
    cfg.launch.store_host = host;
  }
  // The ranks meet (job/engine_meeting.hpp): a rank started twice, or a launch rank 0 refuses,
  // stops every rank here; a rank whose job differs from rank 0's is refused, naming both.
  if (size > 1) {
    auto met = meet_ranks(**who,
                          [&]() -> result<std::string> {
                            if (auto s = check_launch(); !s) return s.error();
                            return config_fingerprint(cfg);
                          },
                          {.token = token_from_env(), .epoch = meeting_epoch_roles});
    if (!met)
      return std::fprintf(stderr, "%s: %s\n", P, met.error().what().c_str()), exit_bad_input;
    if (const std::string mine = config_fingerprint(cfg); *met != mine)
      return std::fprintf(stderr,
                          "%s: rank %d: this rank's job differs from rank 0's (the same program "
                          "and configuration on every rank?): rank 0 '%s', rank %d '%s'\n",
                          P, rank, met->c_str(), rank, mine.c_str()),
             exit_bad_input;
  }
  std::printf("%s: %s: %s\n", P, net::describe(**who).c_str(),
              rank == 0 ? "the store" : ("worker " + std::to_string(rank)).c_str());
  if (rank > 0)
    return run_worker(cfg, rd, rank, /*resume=*/true, /*fresh=*/false,
                      {.from_store = true,
                       // The store rank pretrains the base model before it serves.
                       .connect_wait = std::chrono::minutes(30)});
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const auto t_start = std::chrono::steady_clock::now();
  auto run = start_run(cfg, rd, resume, fresh, /*check_tls=*/true);
  if (!run) return std::fprintf(stderr, "%s: %s\n", P, run.error().what().c_str()), exit_bad_input;
  run_phases phases{.prepare_s = since(t_start)};
  const auto t_rounds = std::chrono::steady_clock::now();
  if (const int code = run_store(cfg, rd, run->store_resumes, /*fresh=*/false); code != 0) {
    std::fprintf(stderr, "%s: the store failed (exit %d)\n", P, code);
    return code;
  }
  if (auto s = check_run_whole(cfg, rd, g); !s)
    return std::fprintf(stderr, "%s: the run is not whole: %s\n", P, s.error().what().c_str()),
           exit_link_lost;
  phases.rounds_s = since(t_rounds);
  return print_results(cfg, rd, g, run->data, run->routing, phases);
}

}  // namespace paco::job
