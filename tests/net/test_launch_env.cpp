// net/launch_env.hpp: rank, size and rendezvous from the launcher's variables (paco's own,
// Open MPI, PMI, Slurm, torchrun), each checked with an error naming the variable; pairs that
// disagree, an unknown or unset PACO_LAUNCHER, and a lone process among many are refused.
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

TEST_CASE("rank_from_env: each launcher's variables", "[net][launch]") {
  REQUIRE(!net::rank_from_env(env_of({})).value());
  auto slurm = net::rank_from_env(env_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}})).value();
  REQUIRE(slurm);
  REQUIRE(slurm->rank == 3);
  REQUIRE(slurm->size == 8);
  REQUIRE(slurm->source == "SLURM_PROCID/SLURM_NTASKS");
  REQUIRE(net::describe(*slurm) == "rank 3 of 8 from SLURM_PROCID/SLURM_NTASKS");
  auto paco_env =
      net::rank_from_env(env_of({{"PACO_RANK", "0"}, {"PACO_WORLD_SIZE", "2"}})).value();
  REQUIRE(paco_env->source == "PACO_RANK/PACO_WORLD_SIZE");
  auto ompi =
      net::rank_from_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}))
          .value();
  REQUIRE(ompi->rank == 1);
  REQUIRE(ompi->source == "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  REQUIRE(net::rank_from_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "4"}})).value()->rank == 1);
  REQUIRE(net::rank_from_env(env_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}})).value()->size == 1);
}

TEST_CASE("rank_from_env: agreeing pairs are one answer, listed in source", "[net][launch]") {
  // srun --mpi=pmi2: Slurm's and PMI's pairs both set, the same rank and size.
  auto both =
      net::rank_from_env(
          env_of(
              {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"PMI_RANK", "2"}, {"PMI_SIZE", "4"}}))
          .value();
  REQUIRE(both);
  REQUIRE(both->rank == 2);
  REQUIRE(both->size == 4);
  REQUIRE(both->source == "PMI_RANK/PMI_SIZE (agrees with SLURM_PROCID/SLURM_NTASKS)");
  REQUIRE(net::describe(*both) ==
          "rank 2 of 4 from PMI_RANK/PMI_SIZE (agrees with SLURM_PROCID/SLURM_NTASKS)");
  auto three = net::rank_from_env(env_of({{"OMPI_COMM_WORLD_RANK", "0"},
                                          {"OMPI_COMM_WORLD_SIZE", "2"},
                                          {"PMI_RANK", "0"},
                                          {"PMI_SIZE", "2"},
                                          {"RANK", "0"},
                                          {"WORLD_SIZE", "2"}}))
                   .value();
  REQUIRE(three->source ==
          "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (agrees with PMI_RANK/PMI_SIZE, "
          "RANK/WORLD_SIZE)");
}

TEST_CASE("rank_from_env: pairs that disagree are an error naming both", "[net][launch]") {
  auto msg = [](const std::map<std::string, std::string>& m) {
    auto r = net::rank_from_env(env_of(m));
    REQUIRE(!r);
    REQUIRE(r.error().code == errc::invalid_argument);
    return r.error().message;
  };
  // A stale PACO_RANK left in a Slurm shell used to win silently.
  const auto stale = msg(
      {{"PACO_RANK", "1"}, {"PACO_WORLD_SIZE", "2"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}});
  REQUIRE(stale.find("launch variables disagree: PACO_RANK/PACO_WORLD_SIZE = 1/2 but "
                     "SLURM_PROCID/SLURM_NTASKS = 3/8") != std::string::npos);
  REQUIRE(stale.find("PACO_LAUNCHER=") != std::string::npos);
  // torchrun-style ranks inside an sbatch step used to take Slurm's 0/1 and train alone.
  const auto torch =
      msg({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}});
  REQUIRE(torch.find("SLURM_PROCID/SLURM_NTASKS = 0/1 but RANK/WORLD_SIZE = 1/2") !=
          std::string::npos);
  REQUIRE(torch.find("set PACO_LAUNCHER=paco|ompi|pmi|slurm|torchrun") != std::string::npos);
  // The same rank with another size disagrees too.
  REQUIRE(msg({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}})
              .find("PMI_RANK/PMI_SIZE = 0/2 but SLURM_PROCID/SLURM_NTASKS = 0/4") !=
          std::string::npos);
  // mpirun inside an srun allocation: Open MPI's rank against Slurm's.
  REQUIRE(msg({{"OMPI_COMM_WORLD_RANK", "1"},
               {"OMPI_COMM_WORLD_SIZE", "2"},
               {"SLURM_PROCID", "0"},
               {"SLURM_NTASKS", "1"}})
              .find("OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE = 1/2 but") != std::string::npos);
  // Every pair set is checked, not only the first.
  REQUIRE(msg({{"PACO_RANK", "0"}, {"PACO_WORLD_SIZE", "2"}, {"RANK", "5"}})
              .find("WORLD_SIZE is not set though RANK is") != std::string::npos);
}

TEST_CASE("rank_from_env: PACO_LAUNCHER chooses one pair", "[net][launch]") {
  const std::map<std::string, std::string> nested = {
      {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}};
  auto with = [&](const std::string& launcher) {
    auto m = nested;
    m["PACO_LAUNCHER"] = launcher;
    return net::rank_from_env(env_of(m));
  };
  auto torch = with("torchrun").value();
  REQUIRE(torch->rank == 1);
  REQUIRE(torch->size == 2);
  REQUIRE(torch->source ==
          "RANK/WORLD_SIZE (PACO_LAUNCHER=torchrun; ignored: SLURM_PROCID/SLURM_NTASKS)");
  // mpirun inside an srun allocation, Open MPI chosen; the other pairs are not even read.
  auto mpi = net::rank_from_env(env_of({{"PACO_LAUNCHER", "ompi"},
                                        {"OMPI_COMM_WORLD_RANK", "1"},
                                        {"OMPI_COMM_WORLD_SIZE", "2"},
                                        {"SLURM_PROCID", "0"},
                                        {"SLURM_NTASKS", "1"},
                                        {"RANK", "x"}}))
                 .value();
  REQUIRE(mpi->rank == 1);
  REQUIRE(mpi->source ==
          "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (PACO_LAUNCHER=ompi; ignored: "
          "SLURM_PROCID/SLURM_NTASKS, RANK/WORLD_SIZE)");
  auto alone =
      net::rank_from_env(
          env_of({{"PACO_LAUNCHER", "paco"}, {"PACO_RANK", "3"}, {"PACO_WORLD_SIZE", "4"}}))
          .value();
  REQUIRE(alone->source == "PACO_RANK/PACO_WORLD_SIZE (PACO_LAUNCHER=paco)");
  // An empty PACO_LAUNCHER is unset: the pairs are compared as usual.
  REQUIRE(!with(""));
  // The chosen pair is still checked.
  auto bad = net::rank_from_env(env_of({{"PACO_LAUNCHER", "pmi"}, {"PMI_RANK", "0"}}));
  REQUIRE(!bad);
  REQUIRE(bad.error().message.find("PMI_SIZE is not set though PMI_RANK is") != std::string::npos);
}

TEST_CASE("rank_from_env: PACO_LAUNCHER unknown, or its pair not set", "[net][launch]") {
  auto msg = [](const std::map<std::string, std::string>& m) {
    auto r = net::rank_from_env(env_of(m));
    REQUIRE(!r);
    REQUIRE(r.error().code == errc::invalid_argument);
    return r.error().message;
  };
  REQUIRE(msg({{"PACO_LAUNCHER", "mpich"}, {"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}) ==
          "PACO_LAUNCHER='mpich' is not one of paco|ompi|pmi|slurm|torchrun");
  REQUIRE(msg({{"PACO_LAUNCHER", "slurm"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}}) ==
          "PACO_LAUNCHER=slurm but SLURM_PROCID/SLURM_NTASKS are not set");
  REQUIRE(msg({{"PACO_LAUNCHER", "torchrun"}}).find("PACO_LAUNCHER=torchrun") != std::string::npos);
}

TEST_CASE("rank_from_env: a world of size 1 among several processes", "[net][launch]") {
  auto msg = [](const std::map<std::string, std::string>& m) {
    auto r = net::rank_from_env(env_of(m));
    REQUIRE(!r);
    REQUIRE(r.error().code == errc::invalid_argument);
    return r.error().message;
  };
  // torchrun started 4 processes on this node, yet the world says 1.
  const std::map<std::string, std::string> local = {
      {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_WORLD_SIZE", "4"}};
  const auto m = msg(local);
  REQUIRE(m.find("world of size 1 from RANK/WORLD_SIZE but") != std::string::npos);
  REQUIRE(m.find("LOCAL_WORLD_SIZE=4") != std::string::npos);
  REQUIRE(m.find("PACO_ALLOW_SINGLE=1") != std::string::npos);
  // Choosing Slurm's 0/1 by PACO_LAUNCHER while torchrun's pair says 2 processes.
  REQUIRE(msg({{"PACO_LAUNCHER", "slurm"},
               {"SLURM_PROCID", "0"},
               {"SLURM_NTASKS", "1"},
               {"RANK", "1"},
               {"WORLD_SIZE", "2"}})
              .find("size 1 from SLURM_PROCID/SLURM_NTASKS (PACO_LAUNCHER=slurm; ignored: "
                    "RANK/WORLD_SIZE) but WORLD_SIZE=2 says") != std::string::npos);
  // PACO_ALLOW_SINGLE=1 runs it alone, and says so.
  auto allowed = local;
  allowed["PACO_ALLOW_SINGLE"] = "1";
  auto one = net::rank_from_env(env_of(allowed)).value();
  REQUIRE(one->size == 1);
  REQUIRE(one->source == "RANK/WORLD_SIZE (PACO_ALLOW_SINGLE=1 though LOCAL_WORLD_SIZE=4)");
  allowed["PACO_ALLOW_SINGLE"] = "yes";
  REQUIRE(msg(allowed) == "PACO_ALLOW_SINGLE='yes' must be 0 or 1");
  // Size 1 with nothing saying otherwise, or LOCAL_WORLD_SIZE=1, is a run of one.
  REQUIRE(
      net::rank_from_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_WORLD_SIZE", "1"}}))
          .value()
          ->size == 1);
  // A world of 4 with LOCAL_WORLD_SIZE=4 is fine.
  REQUIRE(
      net::rank_from_env(env_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "4"}}))
          .value()
          ->rank == 3);
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
