// net/launch_env.hpp: rank, size and rendezvous from the launcher's variables (paco's own,
// Open MPI, PMI, Slurm, torchrun), in that order, each checked with an error naming the
// variable.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "paco/net/launch_env.hpp"

using namespace paco;

namespace {

net::env_lookup env_of(const std::map<std::string, std::string>& m) {
  return [m](const char* k) -> const char* {
    auto it = m.find(k);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("rank_from_env: each launcher's variables, the first set pair winning", "[net][launch]") {
  REQUIRE(!net::rank_from_env(env_of({})).value());
  auto slurm = net::rank_from_env(env_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}})).value();
  REQUIRE(slurm);
  REQUIRE(slurm->rank == 3);
  REQUIRE(slurm->size == 8);
  REQUIRE(slurm->source == "SLURM_PROCID/SLURM_NTASKS");
  // mpirun inside an srun allocation: the MPI rank is this process's.
  auto mpi = net::rank_from_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"},
                                        {"OMPI_COMM_WORLD_SIZE", "2"},
                                        {"SLURM_PROCID", "0"},
                                        {"SLURM_NTASKS", "1"}}))
                 .value();
  REQUIRE(mpi->rank == 1);
  REQUIRE(mpi->source == "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  auto paco_env =
      net::rank_from_env(env_of({{"PACO_RANK", "0"}, {"PACO_WORLD_SIZE", "2"}, {"RANK", "5"}}))
          .value();
  REQUIRE(paco_env->source == "PACO_RANK/PACO_WORLD_SIZE");
  REQUIRE(net::rank_from_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "4"}})).value()->rank == 1);
  REQUIRE(net::rank_from_env(env_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}})).value()->size == 1);
}

TEST_CASE("rank_from_env: half a pair, a non-integer, a rank out of range", "[net][launch]") {
  auto msg = [](const std::map<std::string, std::string>& m) {
    auto r = net::rank_from_env(env_of(m));
    REQUIRE(!r);
    REQUIRE(r.error().code == errc::invalid_argument);
    return r.error().message;
  };
  REQUIRE(msg({{"SLURM_PROCID", "0"}}).find("SLURM_NTASKS is not set") != std::string::npos);
  REQUIRE(msg({{"PACO_RANK", "one"}, {"PACO_WORLD_SIZE", "2"}}).find("PACO_RANK='one'") !=
          std::string::npos);
  REQUIRE(msg({{"PACO_RANK", "2 "}, {"PACO_WORLD_SIZE", "4"}}).find("not an integer") !=
          std::string::npos);
  REQUIRE(msg({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).find("outside 0..3") != std::string::npos);
  REQUIRE(msg({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}).find("outside") != std::string::npos);
  REQUIRE(msg({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}).find("PMI_SIZE must be >= 1") !=
          std::string::npos);
}

TEST_CASE("coordinator_from_env: PACO_COORDINATOR, else MASTER_ADDR:MASTER_PORT", "[net][launch]") {
  REQUIRE(!net::coordinator_from_env(env_of({})).value());
  REQUIRE(*net::coordinator_from_env(env_of({{"PACO_COORDINATOR", "10.0.0.1:29500"},
                                             {"MASTER_ADDR", "x"},
                                             {"MASTER_PORT", "1"}}))
               .value() == "10.0.0.1:29500");
  REQUIRE(*net::coordinator_from_env(env_of({{"MASTER_ADDR", "node17"}, {"MASTER_PORT", "29500"}}))
               .value() == "node17:29500");
  REQUIRE(!net::coordinator_from_env(env_of({{"PACO_COORDINATOR", "node17"}})));
  REQUIRE(!net::coordinator_from_env(env_of({{"PACO_COORDINATOR", "node17:99999"}})));
  const auto half = net::coordinator_from_env(env_of({{"MASTER_ADDR", "node17"}}));
  REQUIRE(!half);
  REQUIRE(half.error().message.find("MASTER_PORT is not set") != std::string::npos);
  REQUIRE(!net::coordinator_from_env(env_of({{"MASTER_ADDR", "a"}, {"MASTER_PORT", "0"}})));
}
