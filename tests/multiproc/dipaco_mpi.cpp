// The DiPaCo store service over MPI (ctest label mpi: mpirun -np 5): rank 0 serves the store,
// ranks 1..4 train the paths of a 2x2 grid; rank 0 checks the final modules are bit-identical to
// the same run in one process over local_store (and so to the inproc and asio_tcp runs).
// Exit status 0 iff the check passed.
#include <cstdio>

#include "../store/service_setup.hpp"
#include "paco/net/mpi.hpp"

int main(int argc, char** argv) {
  paco::net::mpi_environment env(&argc, &argv);
  paco::net::mpi t;
  if (t.size() != paco::testing::service_setup::ranks) {
    std::printf("dipaco_mpi: run with mpirun -np %d\n", paco::testing::service_setup::ranks);
    return 2;
  }
  paco::testing::service_setup s;
  const int r = t.rank();
  std::size_t sent = 0;
  auto st = s.run_rank(t, r, &sent);
  if (!st) {
    std::printf("rank %d: FAILED %s\n", r, st.error().what().c_str());
    return 1;
  }
  if (r != 0)
    return sent == s.expected_bytes() ? 0 : (std::printf("rank %d: FAILED bytes\n", r), 1);
  const auto ref = s.reference_hashes();
  int bad = ref.size() == 4 ? 0 : 1;
  for (int m = 0; m < 4 && !bad; ++m)
    if (s.store.hash(m) != ref[std::size_t(m)] || s.store.round(m) != s.rounds) {
      std::printf("rank 0: FAILED module %d differs from the in-process run\n", m);
      bad = 1;
    }
  if (!bad) std::printf("dipaco over mpi: 4 modules bit-identical to the in-process run\n");
  return bad;
}
