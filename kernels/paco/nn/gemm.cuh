#pragma once
// gemm on the device (host twin nn::gemm): row-major, strided, accumulating, on the context's
// stream and cuBLAS handle, in the context's gemm_math (fp32 or TF32 products, fp32 sums).
// cuBLAS is column-major: a row-major X (r, c) is the column-major Xᵀ, so C = op(A)·op(B) is
// computed as Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped, nothing transposed in memory.
#include <cublas_v2.h>

#include "paco/context_cuda.cuh"
#include "paco/nn/gemm.hpp"

namespace paco::kernels::nn {

namespace detail {
inline cublasOperation_t op(paco::nn::trans t) {
  return t == paco::nn::trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N;
}
inline cublasComputeType_t compute(const cuda_context& ctx) {
  return ctx.math() == gemm_math::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}
}  // namespace detail

// C (M,N) = alpha · op(A) (M,K) · op(B) (K,N) + beta · C, row-major with leading dimensions.
// Requires: device pointers; lda/ldb/ldc ≥ the stored row lengths. Cost: 2·M·N·K flops.
inline status gemm(cuda_context& ctx, paco::nn::trans ta, paco::nn::trans tb, int M, int N, int K,
                   float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                   float* C, int ldc) {
  if (M == 0 || N == 0) return {};
  return cublas_status(cublasGemmEx(ctx.blas(), detail::op(tb), detail::op(ta), N, M, K, &alpha, B,
                                    CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                                    detail::compute(ctx), CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx");
}

// `count` independent products C_i = alpha · op(A_i) · op(B_i) + beta · C_i with
// A_i = A + i·sA, B_i = B + i·sB, C_i = C + i·sC (elements). Same conventions as gemm.
inline status gemm_batched(cuda_context& ctx, paco::nn::trans ta, paco::nn::trans tb, int M, int N,
                           int K, float alpha, const float* A, int lda, long long sA,
                           const float* B, int ldb, long long sB, float beta, float* C, int ldc,
                           long long sC, int count) {
  if (M == 0 || N == 0 || count == 0) return {};
  return cublas_status(
      cublasGemmStridedBatchedEx(ctx.blas(), detail::op(tb), detail::op(ta), N, M, K, &alpha, B,
                                 CUDA_R_32F, ldb, sB, A, CUDA_R_32F, lda, sA, &beta, C, CUDA_R_32F,
                                 ldc, sC, count, detail::compute(ctx), CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

}  // namespace paco::kernels::nn
