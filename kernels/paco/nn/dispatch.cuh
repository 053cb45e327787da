#pragma once
// The cuda_context side of nn/dispatch.hpp: every leaf module's pass and the composites'
// elementwise work on the device, found by argument-dependent lookup when a composite (seq,
// residual, repeat, block_lm) is called with a kernels::cuda_context. So the same nn::gpt runs on
// the device:
//
//   auto ctx = kernels::cuda_context::make().value_or_throw();
//   model.forward_backward(theta_d, grad_d, tokens_d, targets_d, memory_d, dims, ctx);
//
// Pointers are device pointers. A failed launch or cuBLAS call throws error_exception naming it
// (the host modules' contract has no status: they throw too, on exhausted scratch).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "paco/context_cuda.cuh"
#include "paco/nn/attention.cuh"
#include "paco/nn/causal_attention.hpp"
#include "paco/nn/cross_entropy.cuh"
#include "paco/nn/dispatch.hpp"
#include "paco/nn/embedding.cuh"
#include "paco/nn/embedding.hpp"
#include "paco/nn/gelu.cuh"
#include "paco/nn/gelu.hpp"
#include "paco/nn/layer_norm.cuh"
#include "paco/nn/layer_norm.hpp"
#include "paco/nn/linear.cuh"
#include "paco/nn/linear.hpp"
#include "paco/nn/lm_head.hpp"

namespace paco::kernels {

namespace detail {
inline void check(const status& s) {
  s.throw_if_error();
}
}  // namespace detail

// ---- leaves ------------------------------------------------------------------------------------

inline void module_forward(const paco::nn::linear& m, const float* theta, const float* x, float* y,
                           float*, paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::linear);
  detail::check(nn::linear_forward(ctx, theta, x, y, d.rows(), m.in, m.out, m.bias));
}
inline void module_backward(const paco::nn::linear& m, const float* theta, const float* x,
                            const float* dy, float* dx, float* dtheta, const float*,
                            paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::linear);
  detail::check(nn::linear_backward(ctx, theta, x, dy, dx, dtheta, d.rows(), m.in, m.out, m.bias));
}

inline void module_forward(const paco::nn::lm_head& m, const float* theta, const float* x, float* y,
                           float*, paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::linear);
  detail::check(nn::linear_forward(ctx, theta, x, y, d.rows(), m.C, m.V, false));
}
inline void module_backward(const paco::nn::lm_head& m, const float* theta, const float* x,
                            const float* dy, float* dx, float* dtheta, const float*,
                            paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::linear);
  detail::check(nn::linear_backward(ctx, theta, x, dy, dx, dtheta, d.rows(), m.C, m.V, false));
}

inline void module_forward(const paco::nn::gelu& m, const float*, const float* x, float* y, float*,
                           paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::elementwise);
  detail::check(nn::gelu_forward(x, y, std::size_t(d.rows()) * m.C, ctx.stream()));
}
inline void module_backward(const paco::nn::gelu& m, const float*, const float* x, const float* dy,
                            float* dx, float*, const float*, paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::elementwise);
  if (dx) detail::check(nn::gelu_backward(x, dy, dx, std::size_t(d.rows()) * m.C, ctx.stream()));
}

inline void module_forward(const paco::nn::layer_norm& m, const float* theta, const float* x,
                           float* y, float* cache, paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::elementwise);
  detail::check(nn::layer_norm_forward(theta, x, y, cache, d.rows(), m.C, m.eps, ctx.stream()));
}
inline void module_backward(const paco::nn::layer_norm& m, const float* theta, const float* x,
                            const float* dy, float* dx, float* dtheta, const float* cache,
                            paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::elementwise);
  detail::check(nn::layer_norm_backward(theta, x, dy, dx, dtheta, cache, d.rows(), m.C,
                                        ctx.partials(nn::column_sums_floats(d.rows(), m.C, 2)),
                                        ctx.stream()));
}

inline void module_forward(const paco::nn::embedding& m, const float* theta, const std::int32_t* x,
                           float* y, float*, paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::elementwise);
  if (d.T > m.ctx)
    throw error_exception({errc::invalid_argument, "embedding: sequence longer than its context"});
  detail::check(nn::embedding_forward(theta, x, y, d.B, d.T, m.V, m.C, ctx.stream()));
}
inline void module_backward(const paco::nn::embedding& m, const float*, const std::int32_t* x,
                            const float* dy, float*, float* dtheta, const float*, paco::nn::dims d,
                            cuda_context& ctx) {
  const auto timed = ctx.scope(phase::elementwise);
  const std::size_t bytes = nn::embedding_backward_scratch_bytes(d.rows(), m.V);
  detail::check(nn::embedding_backward(x, dy, dtheta, d.B, d.T, m.V, m.C,
                                       ctx.partials((bytes + 3) / 4), bytes, ctx.stream()));
}

inline void module_forward(const paco::nn::causal_attention& m, const float* theta, const float* x,
                           float* y, float* cache, paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::attention);
  detail::check(nn::causal_attention_forward(ctx, theta, x, y, cache, d.B, d.T, m.C, m.NH));
}
inline void module_backward(const paco::nn::causal_attention& m, const float* theta, const float* x,
                            const float* dy, float* dx, float* dtheta, const float* cache,
                            paco::nn::dims d, cuda_context& ctx) {
  const auto timed = ctx.scope(phase::attention);
  detail::check(
      nn::causal_attention_backward(ctx, theta, x, dy, dx, dtheta, cache, d.B, d.T, m.C, m.NH));
}

// ---- the composites' elementwise work ----------------------------------------------------------

namespace detail {
template <int = 0>
__global__ void accumulate_kernel(float* __restrict__ y, const float* __restrict__ x,
                                  std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}
}  // namespace detail

inline void zero(cuda_context& ctx, float* p, std::size_t n) {
  const auto timed = ctx.scope(phase::elementwise);
  detail::check(cuda_status(cudaMemsetAsync(p, 0, n * sizeof(float), ctx.stream()), "zero"));
}
inline void accumulate(cuda_context& ctx, float* y, const float* x, std::size_t n) {
  const auto timed = ctx.scope(phase::elementwise);
  if (n == 0) return;
  detail::accumulate_kernel<<<elementwise_blocks(n), 256, 0, ctx.stream()>>>(y, x, n);
  detail::check(cuda_status(cudaGetLastError(), "accumulate launch"));
}
inline void copy(cuda_context& ctx, float* y, const float* x, std::size_t n) {
  const auto timed = ctx.scope(phase::elementwise);
  detail::check(cuda_status(
      cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, ctx.stream()), "copy"));
}

// The mean cross-entropy of device logits; dlogits as nn::loss_and_grad. Waits for the stream
// and downloads the loss (8 bytes): a training step's one synchronisation.
inline double loss_and_grad(cuda_context& ctx, const float* logits, const std::int32_t* targets,
                            float* dlogits, int N, int V, float scale = 1.0f) {
  cuda_context::frame f(ctx);
  phase_scope timed(ctx.timer(), phase::loss, ctx.stream());
  float* row_loss = ctx.take<float>(std::size_t(N));
  double* loss = ctx.take<double>(1);
  detail::check(
      nn::cross_entropy(logits, targets, dlogits, N, V, scale, row_loss, loss, ctx.stream()));
  double h = 0;
  detail::check(cuda_status(
      cudaMemcpyAsync(&h, loss, sizeof h, cudaMemcpyDeviceToHost, ctx.stream()), "loss download"));
  detail::check(ctx.synchronize());
  return h;
}

}  // namespace paco::kernels
