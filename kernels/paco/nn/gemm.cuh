#pragma once
// gemm on the device (host twin nn::gemm): row-major, strided, accumulating, on the context's
// stream and cuBLAS handle, in the context's gemm_math (fp32, TF32 or bf16 products, fp32 sums;
// bf16: the operands are cast into the context's staging buffer first, C stays fp32).
// cuBLAS is column-major: a row-major X (r, c) is the column-major Xᵀ, so C = op(A)·op(B) is
// computed as Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped, nothing transposed in memory.
#include <cublas_v2.h>

#include "paco/context_cuda.cuh"
#include "paco/elementwise.cuh"
#include "paco/nn/gemm.hpp"

namespace paco::kernels::nn {

namespace detail {
inline cublasOperation_t op(paco::nn::trans t) {
  return t == paco::nn::trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N;
}
inline cublasComputeType_t compute(const cuda_context& ctx) {
  return ctx.math() == gemm_math::fp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
}
// Elements a stored row-major operand of `rows` rows of `cols` spans with leading dimension ld.
inline std::size_t span_of(int rows, int cols, int ld) {
  return rows == 0 || cols == 0 ? 0 : std::size_t(rows - 1) * ld + cols;
}
// C = alpha · op(A) · op(B) + beta · C with A and B cast to bf16 first (gemm_math::bf16).
inline status gemm_bf16(cuda_context& ctx, paco::nn::trans ta, paco::nn::trans tb, int M, int N,
                        int K, float alpha, const float* A, int lda, const float* B, int ldb,
                        float beta, float* C, int ldc) {
  const bool at = ta == paco::nn::trans::yes, bt = tb == paco::nn::trans::yes;
  const std::size_t na = span_of(at ? K : M, at ? M : K, lda),
                    nb = span_of(bt ? N : K, bt ? K : N, ldb);
  const std::size_t na_padded = (na + 127) / 128 * 128;  // B's copy 256-byte aligned
  std::uint16_t* a16 = ctx.staging(na_padded + nb);
  std::uint16_t* b16 = a16 + na_padded;
  if (auto s = cast_to_half(A, na, compress::half_format::bf16, a16, ctx.stream()); !s) return s;
  if (auto s = cast_to_half(B, nb, compress::half_format::bf16, b16, ctx.stream()); !s) return s;
  return cublas_status(cublasGemmEx(ctx.blas(), op(tb), op(ta), N, M, K, &alpha, b16, CUDA_R_16BF,
                                    ldb, a16, CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx (bf16)");
}
}  // namespace detail

// C (M,N) = alpha · op(A) (M,K) · op(B) (K,N) + beta · C, row-major with leading dimensions.
// Requires: device pointers; lda/ldb/ldc ≥ the stored row lengths. Cost: 2·M·N·K flops.
inline status gemm(cuda_context& ctx, paco::nn::trans ta, paco::nn::trans tb, int M, int N, int K,
                   float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                   float* C, int ldc) {
  if (M == 0 || N == 0) return {};
  if (ctx.math() == gemm_math::bf16)
    return detail::gemm_bf16(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return cublas_status(cublasGemmEx(ctx.blas(), detail::op(tb), detail::op(ta), N, M, K, &alpha, B,
                                    CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                                    detail::compute(ctx), CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx");
}

// `count` independent products C_i = alpha · op(A_i) · op(B_i) + beta · C_i with
// A_i = A + i·sA, B_i = B + i·sB, C_i = C + i·sC (elements). Same conventions as gemm; in
// gemm_math::bf16 these run in TF32.
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
