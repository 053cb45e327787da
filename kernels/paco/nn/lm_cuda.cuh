#pragma once
// A block_lm (nn::gpt included) on the device: the device twin of block_lm::workspace, and the
// model's passes on it. The passes are block_lm's own (forward / forward_backward over
// pass_memory with a cuda_context): the composition is the host's, the leaves are the device
// twins of kernels/paco/nn/dispatch.cuh.
//
//   auto ws = kernels::make_lm_workspace(model, {B, T}).value_or_throw();
//   double loss = kernels::forward_backward(model, theta_d, grad_d, x_d, y_d, ws);
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "paco/context_cuda.cuh"
#include "paco/cuda_buffer.cuh"
#include "paco/nn/dispatch.cuh"

namespace paco::kernels {

template <class M>
struct lm_workspace {
  paco::nn::dims d;
  buffer<float, cuda> cache;
  buffer<float, cuda> logits;          // (N, V); also dlogits
  buffer<float, cuda> grad_a, grad_b;  // (N, C) gradient ping-pong
  cuda_context ctx;

  typename M::pass_memory memory() {
    return {cache.data(), logits.data(), grad_a.data(), grad_b.data()};
  }
};

// Device memory for batches of shape d on `device`: the model's cache, logits and gradient
// buffers, and a context whose workspace holds the passes' scratch. Errors: errc::unsupported
// naming what failed (no device, no room).
template <class M>
result<lm_workspace<M>> make_lm_workspace(const M& model, paco::nn::dims d, int device = 0) {
  const std::size_t N = d.rows(), C = model.width();
  // The modules' scratch, the loss's (N floats + a double) and the clip's partial sums.
  const std::size_t scratch = model.scratch_bytes(d) + N * sizeof(float) + (64u << 10);
  auto ctx = cuda_context::make(device, scratch);
  if (!ctx) return ctx.error();
  try {
    lm_workspace<M> w{d,
                      buffer<float, cuda>(model.cache_size(d)),
                      buffer<float, cuda>(N * model.vocab()),
                      buffer<float, cuda>(N * C),
                      buffer<float, cuda>(N * C),
                      std::move(*ctx)};
    return result<lm_workspace<M>>(std::move(w));
  } catch (const std::bad_alloc&) {
    return error(errc::unsupported, "make_lm_workspace: no device room for batch " +
                                        std::to_string(d.B) + "×" + std::to_string(d.T));
  }
}

// The model's forward on the device: logits (N, V) into w.logits. Device pointers throughout.
template <class M>
void forward(const M& model, const float* theta, const std::int32_t* tokens, lm_workspace<M>& w) {
  model.forward(theta, tokens, w.memory(), w.d, w.ctx);
}

// Forward + backward on the device: ACCUMULATES ∇θ of (scale · mean loss) into grad (a device
// plane). Returns the mean loss (downloaded: the step's one synchronisation).
template <class M>
double forward_backward(const M& model, const float* theta, float* grad, const std::int32_t* tokens,
                        const std::int32_t* targets, lm_workspace<M>& w, float scale = 1.0f) {
  return model.forward_backward(theta, grad, tokens, targets, w.memory(), w.d, w.ctx, scale);
}

}  // namespace paco::kernels
