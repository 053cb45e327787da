// mpirun -np 4 bench_allreduce_mpi [MAX_BYTES]: paco::collectives::allreduce_ring over net::mpi and
// Open MPI's own MPI_Allreduce, same processes, same sizes; rank 0 prints one JSON row per size.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "paco/collectives/collectives.hpp"
#include "paco/core/buffer.hpp"
#include "paco/net/mpi.hpp"
#include "ring_common.hpp"

using namespace paco;
using clk = std::chrono::steady_clock;

int main(int argc, char** argv) {
  net::mpi_environment env(&argc, &argv);
  net::mpi t;
  int rank = t.rank(), p = t.size();
  std::size_t max_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (std::size_t(64) << 20);
  int bad = 0;
  for (std::size_t bytes : bench::sizes(max_bytes)) {
    std::size_t n = bytes / 4;
    host_buffer<float> x(n), y(n);
    int iters = bench::iterations(bytes);
    for (int which = 0; which < 2; ++which) {
      std::vector<double> secs, cpu;
      for (int it = -2; it < iters; ++it) {
        for (std::size_t i = 0; i < n; ++i) x[i] = float((rank + 1) * int(i % 89 + 1));
        MPI_Barrier(MPI_COMM_WORLD);
        double c0 = bench::cpu_seconds();
        auto t0 = clk::now();
        if (which == 0) {
          auto st = collectives::allreduce_ring(t, x.view(),
                                                {.until = net::after(std::chrono::seconds(60))});
          if (!st) {
            std::fprintf(stderr, "rank %d: %s\n", rank, st.error().what().c_str());
            MPI_Abort(MPI_COMM_WORLD, 1);
          }
        } else {
          MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        }
        double s = std::chrono::duration<double>(clk::now() - t0).count();
        double c = bench::cpu_seconds() - c0;
        if (it < 0) {
          for (std::size_t i = 0; i < n; ++i)
            if (x[i] != float(p * (p + 1) / 2 * int(i % 89 + 1))) bad = 1;
          continue;
        }
        secs.push_back(s);
        cpu.push_back(c);
      }
      if (rank == 0) bench::print_row(which == 0 ? "mpi" : "ompi_allreduce", bytes, p, secs, cpu);
    }
  }
  if (bad) std::fprintf(stderr, "rank %d: wrong all-reduce result\n", rank);
  return bad;
}
