#pragma once
// gemm: the host matrix product every nn module goes through. Row-major, strided, accumulating.
// With PACO_WITH_BLAS it calls CBLAS (OpenBLAS; measured 85% of peak here against Eigen's 60-67%),
// otherwise Eigen's own GEMM over Eigen::Map views. Single-threaded inside: paco threads over the
// batch (see nn/step_runner.hpp), so one BLAS thread per caller thread.

#include <cstddef>
#include <cstdio>
#include <type_traits>

#ifdef PACO_WITH_BLAS
#include <cblas.h>
extern "C" {
void openblas_set_num_threads(int);
char* openblas_get_corename(void);
}
#endif

#include <Eigen/Core>

namespace paco::nn {

enum class trans : bool { no = false, yes = true };

// C (M,N) = alpha · op(A) (M,K) · op(B) (K,N) + beta · C, all row-major with leading dimensions.
// Requires: lda/ldb/ldc ≥ the row lengths of the stored matrices; T is float or double.
// Ensures: C holds the result; with beta = 1 it accumulates.
// Cost: 2·M·N·K flops.
template <class T>
inline void gemm(trans ta, trans tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                 int ldb, T beta, T* C, int ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  if (M == 0 || N == 0) return;
#ifdef PACO_WITH_BLAS
  auto ta_ = ta == trans::yes ? CblasTrans : CblasNoTrans;
  auto tb_ = tb == trans::yes ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta_, tb_, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta_, tb_, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  using mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using stride = Eigen::OuterStride<>;
  using cmap = Eigen::Map<const mat, 0, stride>;
  Eigen::Map<mat, 0, stride> c(C, M, N, stride(ldc));
  if (beta == T(0))
    c.setZero();
  else if (beta != T(1))
    c *= beta;
  // op(A): stored (M,K) or (K,M); op(B): stored (K,N) or (N,K).
  auto a = cmap(A, ta == trans::yes ? K : M, ta == trans::yes ? M : K, stride(lda));
  auto b = cmap(B, tb == trans::yes ? N : K, tb == trans::yes ? K : N, stride(ldb));
  if (ta == trans::no && tb == trans::no)
    c.noalias() += alpha * a * b;
  else if (ta == trans::no)
    c.noalias() += alpha * a * b.transpose();
  else if (tb == trans::no)
    c.noalias() += alpha * a.transpose() * b;
  else
    c.noalias() += alpha * a.transpose() * b.transpose();
#endif
}

// Runs the GEMM backend on n threads (n < 1 counts as 1). OpenBLAS's threads spin while they
// wait: more threads than free cores stretch every product (a 1 s evaluation took minutes on a
// runner whose cores were busy).
inline void gemm_threads(int n) {
  n = n < 1 ? 1 : n;
#ifdef PACO_WITH_BLAS
  openblas_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

// Makes the GEMM backend single-threaded (paco threads over the batch itself).
inline void gemm_single_threaded() {
  gemm_threads(1);
}

// A description of the GEMM backend, e.g. "openblas (SkylakeX)" or "eigen".
inline const char* gemm_backend() {
#ifdef PACO_WITH_BLAS
  static thread_local char buf[64];
  std::snprintf(buf, sizeof buf, "openblas (%s)", openblas_get_corename());
  return buf;
#else
  return "eigen";
#endif
}

}  // namespace paco::nn
