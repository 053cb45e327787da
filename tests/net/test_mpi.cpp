// The Transport conformance checks and the collectives over net::mpi, run under
// mpirun -np 4 (ctest label mpi). Exit status 0 iff every check passed on this rank.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "paco/collectives/collectives.hpp"
#include "paco/net/mpi.hpp"

using namespace paco;
using namespace std::chrono_literals;

static int failures = 0;
#define CHECK_MPI(cond, what)                                                      \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::printf("rank %d: FAILED %s (%s:%d)\n", rank, what, __FILE__, __LINE__); \
      ++failures;                                                                  \
    }                                                                              \
  } while (0)

int main(int argc, char** argv) {
  net::mpi_environment env(&argc, &argv);
  net::mpi t;
  const int rank = t.rank(), p = t.size();
  const int right = (rank + 1) % p, left = (rank + p - 1) % p;
  {  // FIFO per tag, tags independent, zero-length, mismatch, timeout, cancel
    std::vector<int> a(1000, rank), b(3, rank), ra(1000), rb(3), r3(3);
    auto d = net::after(10s);
    auto s1 = t.send(right, 1, net::as_bytes(std::span<const int>(a)), d);
    auto s2 = t.send(right, 2, net::as_bytes(std::span<const int>(b)), d);
    auto s3 = t.send(right, 3, {}, d);
    auto v2 = t.recv(left, 2, net::as_writable_bytes(std::span<int>(rb)), d);
    auto v1 = t.recv(left, 1, net::as_writable_bytes(std::span<int>(ra)), d);
    auto v3 = t.recv(left, 3, {}, d);
    CHECK_MPI(!v2.wait() && !v1.wait() && !v3.wait(), "recvs");
    CHECK_MPI(!s1.wait() && !s2.wait() && !s3.wait(), "sends");
    CHECK_MPI(ra[999] == left && rb[2] == left, "payloads");
    auto s4 = t.send(right, 4, net::as_bytes(std::span<const int>(a)), d);
    auto v4 = t.recv(left, 4, net::as_writable_bytes(std::span<int>(r3)), d);
    CHECK_MPI(v4.wait() == errc::mismatch, "mismatch");
    s4.wait();
    auto t0 = net::clock::now();
    auto v5 = t.recv(left, 5, net::as_writable_bytes(std::span<int>(r3)), t0 + 200ms);
    CHECK_MPI(v5.wait() == errc::timeout, "timeout");
    CHECK_MPI(net::clock::now() - t0 < 1s, "timeout on time");
    auto v6 = t.recv(left, 6, net::as_writable_bytes(std::span<int>(r3)), net::after(10s));
    t.cancel_all();
    CHECK_MPI(v6.wait() == errc::cancelled, "cancel_all");
    CHECK_MPI(t.send(rank, 1, {}, d).wait() == errc::invalid_argument, "self send");
  }
  for (std::size_t n :
       {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1001), std::size_t(262147)}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = float((rank + 1) * int(i % 97 + 1));
    int order[] = {2, 0, 3, 1};
    auto st =
        collectives::allreduce_ring(t, std::span<float>(x), {.chunk_bytes = 4096, .order = order});
    CHECK_MPI(st.ok(), "allreduce status");
    for (std::size_t i = 0; i < n; ++i)
      if (x[i] != float(p * (p + 1) / 2 * int(i % 97 + 1))) {
        CHECK_MPI(false, "allreduce value");
        break;
      }
    std::vector<float> b(n, float(rank));
    CHECK_MPI(collectives::broadcast(t, std::span<float>(b), 1, {.tag = 7}).ok(), "broadcast");
    for (std::size_t i = 0; i < n; ++i)
      if (b[i] != 1.0f) {
        CHECK_MPI(false, "broadcast value");
        break;
      }
    std::vector<int> g(n, -1);
    auto [off, cnt] = collectives::block_of(n, p, rank);
    for (std::size_t i = off; i < off + cnt; ++i) g[i] = rank;
    CHECK_MPI(collectives::all_gather(t, std::span<int>(g), {.tag = 8}).ok(), "all_gather");
    for (int q = 0; q < p; ++q) {
      auto [qo, qc] = collectives::block_of(n, p, q);
      for (std::size_t i = qo; i < qo + qc; ++i)
        if (g[i] != q) {
          CHECK_MPI(false, "all_gather value");
          q = p;
          break;
        }
    }
    CHECK_MPI(collectives::barrier(t, {.tag = 9}).ok(), "barrier");
  }
  std::printf("rank %d: %s\n", rank, failures ? "FAILED" : "all mpi checks passed");
  return failures ? 1 : 0;
}
