#pragma once
// launch_env: this process's rank, the world size and the rendezvous address, read from the
// launcher that started it, so that one binary runs unchanged under a shell script, srun,
// mpirun or torchrun-style environments:
//
//   rank, size   PACO_RANK / PACO_WORLD_SIZE        (paco's own; a script sets them)
//                OMPI_COMM_WORLD_RANK / _SIZE       (Open MPI's mpirun)
//                PMI_RANK / PMI_SIZE                (MPICH, Intel MPI)
//                SLURM_PROCID / SLURM_NTASKS        (srun)
//                RANK / WORLD_SIZE                  (torchrun's convention)
//   rendezvous   PACO_COORDINATOR ("host:port"), else MASTER_ADDR and MASTER_PORT
// The first pair found wins; it is checked before use.
//
//   auto who = net::rank_from_env().value_or_throw();    // nullopt: no launcher variables
//   if (who) { opts.rank = who->rank; opts.size = who->size; }

#include <charconv>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "paco/core/error.hpp"

namespace paco::net {

struct launch_rank {
  int rank = 0;
  int size = 1;
  std::string source;  // the variables it came from, e.g. "SLURM_PROCID/SLURM_NTASKS"
};

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

}  // namespace detail

// The rank and size from the first launcher pair of variables that is set (see the file
// comment). Ensures: nullopt when none is; else 0 ≤ rank < size. Errors: invalid_argument
// naming the variable for half a pair, a value that is not an integer, or a rank outside
// 0 .. size − 1.
inline result<std::optional<launch_rank>> rank_from_env(const env_lookup& env = std::getenv) {
  static constexpr const char* pairs[][2] = {{"PACO_RANK", "PACO_WORLD_SIZE"},
                                             {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                             {"PMI_RANK", "PMI_SIZE"},
                                             {"SLURM_PROCID", "SLURM_NTASKS"},
                                             {"RANK", "WORLD_SIZE"}};
  for (auto& [rn, sn] : pairs) {
    const char* r = env(rn);
    const char* s = env(sn);
    if (!r && !s) continue;
    if (!r || !s)
      return error(errc::invalid_argument,
                   std::string(r ? sn : rn) + " is not set though " + (r ? rn : sn) + " is");
    auto rank = detail::env_int(rn, r);
    if (!rank) return rank.error();
    auto size = detail::env_int(sn, s);
    if (!size) return size.error();
    if (*size < 1)
      return error(errc::invalid_argument, std::string(sn) + " must be >= 1, got " + s);
    if (*rank < 0 || *rank >= *size)
      return error(errc::invalid_argument, std::string(rn) + "=" + r + " is outside 0.." +
                                               std::to_string(*size - 1) + " (" + sn + "=" + s +
                                               ")");
    return std::optional<launch_rank>(
        launch_rank{*rank, *size, std::string(rn) + "/" + std::string(sn)});
  }
  return std::optional<launch_rank>{};
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
