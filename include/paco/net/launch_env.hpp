#pragma once
// launch_env: this process's rank, the world size and the rendezvous address, read from the
// launcher that started it, so that one binary runs unchanged under a shell script, srun,
// mpirun or torchrun-style environments:
//
//   rank, size   PACO_RANK / PACO_WORLD_SIZE        paco      (paco's own; a script sets them)
//                OMPI_COMM_WORLD_RANK / _SIZE       ompi      (Open MPI's mpirun)
//                PMI_RANK / PMI_SIZE                pmi       (MPICH, Intel MPI, srun --mpi)
//                SLURM_PROCID / SLURM_NTASKS        slurm     (srun, sbatch)
//                RANK / WORLD_SIZE                  torchrun  (torchrun's convention)
//   rendezvous   PACO_COORDINATOR ("host:port"), else MASTER_ADDR and MASTER_PORT
//
// Launchers nest (mpirun or torchrun inside an sbatch step, a script's PACO_RANK left over in a
// Slurm shell), so no pair silently wins:
//   - Every pair that is set is read and checked. Pairs that agree (same rank, same size) are
//     one answer, and `source` lists them all; pairs that disagree are an error naming both
//     with their values.
//   - PACO_LAUNCHER=paco|ompi|pmi|slurm|torchrun (the middle column) uses that pair alone; the
//     others are not read, and `source` names those that are set as ignored. An empty
//     PACO_LAUNCHER counts as unset; another value, or a chosen pair that is not set, is an
//     error naming PACO_LAUNCHER.
//   - A world of size 1 is refused when another variable says more processes were started:
//     LOCAL_WORLD_SIZE > 1 (torchrun's processes on this node), or the size variable of a pair
//     not used (an integer > 1 in PACO_WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS
//     or WORLD_SIZE; only possible with PACO_LAUNCHER, the pairs would disagree otherwise).
//     PACO_ALLOW_SINGLE=1 runs it alone anyway (and `source` says so).
//
//   auto who = net::rank_from_env().value_or_throw();    // nullopt: no launcher variables
//   if (who) { opts.rank = who->rank; opts.size = who->size; std::puts(describe(*who).c_str()); }

#include <charconv>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::net {

struct launch_rank {
  int rank = 0;
  int size = 1;
  // The variables it came from, e.g. "SLURM_PROCID/SLURM_NTASKS", with what else was seen in
  // parentheses: "PMI_RANK/PMI_SIZE (agrees with SLURM_PROCID/SLURM_NTASKS)".
  std::string source;
};

// One line for a log. Ensures: "rank R of S from SOURCE", e.g. "rank 1 of 4 from
// SLURM_PROCID/SLURM_NTASKS".
inline std::string describe(const launch_rank& r) {
  return "rank " + std::to_string(r.rank) + " of " + std::to_string(r.size) + " from " + r.source;
}

// One launcher's pair of variables; `name` is its PACO_LAUNCHER value.
struct launcher_vars {
  const char* name;
  const char* rank;
  const char* size;
};

// Every launcher rank_from_env reads, in the order its errors and `source` list them.
inline constexpr launcher_vars launchers[] = {
    {"paco", "PACO_RANK", "PACO_WORLD_SIZE"},
    {"ompi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS"},
    {"torchrun", "RANK", "WORLD_SIZE"}};

// Looks up an environment variable (nullptr when unset); std::getenv by default, a map in tests.
using env_lookup = std::function<const char*(const char*)>;

namespace detail {

inline result<int> env_int(const char* name, const char* v) {
  int x = 0;
  const std::string s = v;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size())
    return error(errc::invalid_argument, std::string(name) + "='" + s + "' is not an integer");
  return x;
}

inline std::string pair_name(const launcher_vars& l) {
  return std::string(l.rank) + "/" + l.size;
}

inline bool pair_is_set(const launcher_vars& l, const env_lookup& env) {
  return env(l.rank) || env(l.size);
}

// One launcher's pair, checked. Ensures: nullopt when neither variable is set; else
// 0 ≤ rank < size and source = "RANK_VAR/SIZE_VAR". Errors: invalid_argument naming the
// variable for half a pair, a value that is not an integer, or a rank outside 0 .. size − 1.
inline result<std::optional<launch_rank>> read_pair(const launcher_vars& l, const env_lookup& env) {
  const char* r = env(l.rank);
  const char* s = env(l.size);
  if (!r && !s) return std::optional<launch_rank>{};
  if (!r || !s)
    return error(errc::invalid_argument, std::string(r ? l.size : l.rank) + " is not set though " +
                                             (r ? l.rank : l.size) + " is");
  auto rank = env_int(l.rank, r);
  if (!rank) return rank.error();
  auto size = env_int(l.size, s);
  if (!size) return size.error();
  if (*size < 1)
    return error(errc::invalid_argument, std::string(l.size) + " must be >= 1, got " + s);
  if (*rank < 0 || *rank >= *size)
    return error(errc::invalid_argument, std::string(l.rank) + "=" + r + " is outside 0.." +
                                             std::to_string(*size - 1) + " (" + l.size + "=" + s +
                                             ")");
  return std::optional<launch_rank>(launch_rank{*rank, *size, pair_name(l)});
}

// The first variable saying that more than one process was started, as "NAME=value" (empty
// when none): LOCAL_WORLD_SIZE, or the size variable of a launcher other than `used`, holding
// an integer > 1. Values that are not integers are not signs (a pair in use was checked).
inline std::string more_processes_sign(const env_lookup& env, const launcher_vars* used) {
  auto sign = [&](const char* name) -> std::string {
    const char* v = env(name);
    if (!v) return {};
    auto n = env_int(name, v);
    return n && *n > 1 ? std::string(name) + "=" + v : std::string{};
  };
  if (auto s = sign("LOCAL_WORLD_SIZE"); !s.empty()) return s;
  for (const auto& l : launchers)
    if (&l != used)
      if (auto s = sign(l.size); !s.empty()) return s;
  return {};
}

inline std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

}  // namespace detail

// The rank and size from the launcher's variables (see the file comment for the rules).
// Ensures: nullopt when no pair is set (and PACO_LAUNCHER is not); else 0 ≤ rank < size, every
// pair set agrees with it (or PACO_LAUNCHER chose one), and `source` names the variables used.
// Errors (invalid_argument): half a pair, a value that is not an integer, a rank outside
// 0 .. size − 1 (naming the variable); two pairs that disagree (naming both, with values); a
// PACO_LAUNCHER that is unknown or names a pair not set; a world of size 1 while another
// variable says more processes were started, without PACO_ALLOW_SINGLE=1 (naming both).
inline result<std::optional<launch_rank>> rank_from_env(const env_lookup& env = std::getenv) {
  const std::string choices = "paco|ompi|pmi|slurm|torchrun";
  bool allow_single = false;
  if (const char* a = env("PACO_ALLOW_SINGLE"); a && *a) {
    const std::string s = a;
    if (s != "0" && s != "1")
      return error(errc::invalid_argument, "PACO_ALLOW_SINGLE='" + s + "' must be 0 or 1");
    allow_single = s == "1";
  }

  const launcher_vars* used = nullptr;
  launch_rank who;
  std::vector<std::string> notes;  // what `source` adds in parentheses
  if (const char* chosen = env("PACO_LAUNCHER"); chosen && *chosen) {
    for (const auto& l : launchers)
      if (std::string(chosen) == l.name) used = &l;
    if (!used)
      return error(errc::invalid_argument,
                   "PACO_LAUNCHER='" + std::string(chosen) + "' is not one of " + choices);
    auto r = detail::read_pair(*used, env);
    if (!r) return r.error();
    if (!*r)
      return error(errc::invalid_argument, "PACO_LAUNCHER=" + std::string(chosen) + " but " +
                                               detail::pair_name(*used) + " are not set");
    who = **r;
    notes.push_back("PACO_LAUNCHER=" + std::string(chosen));
    std::vector<std::string> ignored;
    for (const auto& l : launchers)
      if (&l != used && detail::pair_is_set(l, env)) ignored.push_back(detail::pair_name(l));
    if (!ignored.empty()) notes.push_back("ignored: " + detail::join(ignored, ", "));
  } else {
    std::vector<std::string> agree;
    for (const auto& l : launchers) {
      auto r = detail::read_pair(l, env);
      if (!r) return r.error();
      if (!*r) continue;
      if (!used) {
        used = &l;
        who = **r;
      } else if ((*r)->rank != who.rank || (*r)->size != who.size) {
        auto values = [](const launch_rank& x) {
          return " = " + std::to_string(x.rank) + "/" + std::to_string(x.size);
        };
        return error(errc::invalid_argument, "launch variables disagree: " + who.source +
                                                 values(who) + " but " + (*r)->source +
                                                 values(**r) + "; set PACO_LAUNCHER=" + choices +
                                                 " to choose one, or unset the stale ones");
      } else {
        agree.push_back((*r)->source);
      }
    }
    if (!used) return std::optional<launch_rank>{};
    if (!agree.empty()) notes.push_back("agrees with " + detail::join(agree, ", "));
  }

  auto with_notes = [&] {
    return notes.empty() ? who.source : who.source + " (" + detail::join(notes, "; ") + ")";
  };
  if (who.size == 1)
    if (auto sign = detail::more_processes_sign(env, used); !sign.empty()) {
      if (!allow_single)
        return error(errc::invalid_argument,
                     "launch variables give a world of size 1 from " + with_notes() + " but " +
                         sign +
                         " says more processes were started; set PACO_ALLOW_SINGLE=1 to "
                         "run alone anyway");
      notes.push_back("PACO_ALLOW_SINGLE=1 though " + sign);
    }
  who.source = with_notes();
  return std::optional<launch_rank>(std::move(who));
}

// The rendezvous "host:port": PACO_COORDINATOR, else MASTER_ADDR:MASTER_PORT. Ensures: nullopt
// when neither is set. Errors: invalid_argument for half of MASTER_ADDR/MASTER_PORT, a port
// that is not in 1..65535, or a PACO_COORDINATOR without ":port".
inline result<std::optional<std::string>> coordinator_from_env(
    const env_lookup& env = std::getenv) {
  if (const char* c = env("PACO_COORDINATOR")) {
    const std::string s = c;
    const auto colon = s.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
      return error(errc::invalid_argument, "PACO_COORDINATOR='" + s + "' is not host:port");
    auto port = detail::env_int("PACO_COORDINATOR's port", s.c_str() + colon + 1);
    if (!port || *port < 1 || *port > 65535)
      return error(errc::invalid_argument, "PACO_COORDINATOR='" + s + "' has no valid port");
    return std::optional<std::string>(s);
  }
  const char* a = env("MASTER_ADDR");
  const char* p = env("MASTER_PORT");
  if (!a && !p) return std::optional<std::string>{};
  if (!a || !p)
    return error(errc::invalid_argument, std::string(a ? "MASTER_PORT" : "MASTER_ADDR") +
                                             " is not set though " +
                                             (a ? "MASTER_ADDR" : "MASTER_PORT") + " is");
  auto port = detail::env_int("MASTER_PORT", p);
  if (!port) return port.error();
  if (*port < 1 || *port > 65535)
    return error(errc::invalid_argument,
                 std::string("MASTER_PORT=") + p + " is not a port in 1..65535");
  return std::optional<std::string>(std::string(a) + ":" + p);
}

}  // namespace paco::net
