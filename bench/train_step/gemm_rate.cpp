// GEMM rate of paco's host gemm for one shape (M,N,K), single-threaded: "gflops" on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "paco/core/buffer.hpp"
#include "paco/nn/gemm.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_gemm M N K [reps]\n");
    return 2;
  }
  int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]);
  int reps = argc > 4 ? std::atoi(argv[4]) : 9;
  paco::nn::gemm_single_threaded();
  paco::buffer<float> A(std::size_t(M) * K), B(std::size_t(K) * N), C(std::size_t(M) * N);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = float(i % 7) * 0.1f;
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = float(i % 5) * 0.1f;
  std::vector<double> r;
  for (int k = 0; k < reps; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    paco::nn::gemm<float>(paco::nn::trans::no, paco::nn::trans::yes, M, N, K, 1.0f, A.data(), K,
                          B.data(), K, 0.0f, C.data(), N);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.push_back(2.0 * M * N * K / s / 1e9);
  }
  std::sort(r.begin(), r.end());
  std::printf("%.1f %s\n", r[r.size() / 2], paco::nn::gemm_backend());
}
