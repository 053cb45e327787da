#pragma once
// diloco_replica_cuda: one rank of DiLoCo over an all-reduce (train::round_loop's blocking rule)
// with the replica on the device. A round is
//   anchor ← θ (device copy) → H inner steps on the device (inner_loop_cuda) →
//   Δ = anchor − θ on the device → the mean Δ over the ranks → θ ← anchor, outer Nesterov step on
//   the device → every rank's θ fingerprint compared
// and only encoded bytes cross PCIe:
//   fp32 (no codec)   Δ comes down (4n bytes: its encoding is itself), the ring all-reduce sums
//                     it on the host, the mean goes up (4n)
//   fp32 on devices   with a device_allreduce (nccl_comm::allreducer(), nccl.cuh): Δ is summed
//                     in device memory; nothing comes down but the fingerprint and the losses
//   int8/int4/int2    device_codec encodes Δ + residual on the device; its payload (≈ n·bits/8
//                     bytes + scales) comes down, the ranks all-gather payloads, every rank's goes
//                     up and is decoded and summed in rank order on the device
// plus 8 bytes per inner step (its loss) and 8 per round (the θ fingerprint). transfers() shows
// it per round. The residual is plane::residual, the outer momentum plane::outer_momentum.
//
// The θ fingerprint is Σ_i mix(bits(θ_i), i) mod 2⁶⁴, computed on the device (any summation
// order gives the same value); every rank of a device round computes it the same way, so the
// ranks of one run are all device ranks.
//
//   kernels::diloco_replica_cuda<net::inproc, nn::gpt> r(world[rank], loop, dev_arena,
//       optim::adamw{.lr = 1e-3f}, H, outer::nesterov{}, std::move(codec));
//   r.run(rounds, std::chrono::minutes(5));
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "paco/arena_cuda.cuh"
#include "paco/codec_cuda.cuh"
#include "paco/collectives/collectives.hpp"
#include "paco/collectives/counted.hpp"
#include "paco/elementwise.cuh"
#include "paco/inner_loop_cuda.cuh"
#include "paco/net/concepts.hpp"
#include "paco/outer/nesterov.hpp"
#include "paco/train/diloco_allreduce.hpp"

namespace paco::kernels {

namespace detail {

#define PACO_EACH(i, n)                                                                          \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

template <int = 0>
__global__ void difference_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ d, std::size_t n) {
  PACO_EACH(i, n) d[i] = a[i] - b[i];
}
template <int = 0>
__global__ void add_kernel(float* __restrict__ y, const float* __restrict__ x, std::size_t n) {
  PACO_EACH(i, n) y[i] += x[i];
}
template <int = 0>
__global__ void scale_kernel(float* __restrict__ y, float c, std::size_t n) {
  PACO_EACH(i, n) y[i] *= c;
}
template <int = 0>
__global__ void fingerprint_kernel(const float* __restrict__ x, std::size_t n,
                                   unsigned long long* __restrict__ sum) {
  unsigned long long s = 0;
  PACO_EACH(i, n) {
    unsigned long long z = __float_as_uint(x[i]) + (i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s += z ^ (z >> 31);
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) atomicAdd(sum, s);  // addition mod 2⁶⁴: any order, the same total
}

#undef PACO_EACH

}  // namespace detail

// A sum of device floats over the ranks, in place, enqueued on a stream (e.g. NCCL's).
using device_allreduce = std::function<status(float* data, std::size_t n, cudaStream_t stream)>;

template <net::Transport T, class M>
class diloco_replica_cuda {
 public:
  // Requires: t, loop and a outlive the replica; a's param plane holds this rank's θ (the same
  // on every rank); loop trains a's model; codec, when given, is built from the same spec and
  // segments on every rank (train::diloco_codec's segments); sum, when given (fp32 only: no
  // codec), spans the same ranks as t. Throws error_exception when the device has no room for
  // the round's buffers, or for a codec together with a device sum.
  diloco_replica_cuda(T& t, inner_loop_cuda<M>& loop, arena<cuda>& a, optim::adamw inner, int H,
                      outer::nesterov outer, std::optional<device_codec> codec = std::nullopt,
                      device_allreduce sum = {})
      : t_(&t),
        loop_(&loop),
        a_(&a),
        inner_(inner),
        H_(H),
        outer_(outer),
        codec_(std::move(codec)),
        device_sum_(std::move(sum)) {
    if (codec_ && device_sum_)
      throw error_exception({errc::invalid_argument,
                             "diloco_replica_cuda: a device all-reduce carries fp32 Δ; a codec's "
                             "payloads go over the transport (give one or the other)"});
    const std::size_t n = a.get(plane::param).size();
    try {
      delta_.resize(n);
      mean_.resize(n);
      if (codec_) tmp_.resize(n);
      fingerprint_.resize(1);
    } catch (const std::bad_alloc&) {
      throw error_exception({errc::unsupported, "diloco_replica_cuda: no device room for Δ"});
    }
    if (codec_ && codec_->size() != n)
      throw error_exception({errc::mismatch, "diloco_replica_cuda: the codec covers " +
                                                 std::to_string(codec_->size()) +
                                                 " elements, the model's plane " +
                                                 std::to_string(n)});
  }

  // n rounds, each within round_deadline; on_round(round, bytes sent, mean inner loss) after
  // each. Errors: the collectives' (timeout, peer_lost …), a payload's (corrupt …), mismatch if
  // the replicas' θ differ after a round, or a CUDA error naming the call.
  status run(int n, std::chrono::steady_clock::duration round_deadline,
             const std::function<void(long, std::size_t, double)>& on_round = {}) {
    for (int k = 0; k < n; ++k) {
      train::diloco_options o;
      o.collective.until = net::after(round_deadline);
      const std::size_t before = traffic_.bytes_sent;
      double loss = 0;
      try {
        if (auto s = round(o, loss); !s) return s;
      } catch (const error_exception& e) {
        return e.err;
      }
      ++done_;
      if (on_round) on_round(done_ - 1, traffic_.bytes_sent - before, loss);
    }
    return {};
  }

  const train::diloco_traffic& traffic() const noexcept { return traffic_; }
  // The round's own copies across PCIe (the codec's, the mean's, the fingerprints), summed over
  // the rounds; the inner loop's (batches, losses) are loop.transfers().
  const transfer_log& transfers() const noexcept { return log_; }
  long rounds_done() const noexcept { return done_; }

 private:
  static void check(const status& s) { s.throw_if_error(); }

  status round(const train::diloco_options& o, double& loss) {
    auto& ctx = loop_->workspace().ctx;
    const cudaStream_t st = ctx.stream();
    auto th = a_->get(plane::param);
    auto an = a_->get(plane::anchor);
    const std::size_t n = th.size();
    check(cuda_status(
        cudaMemcpyAsync(an.data(), th.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, st),
        "anchor copy"));
    loss = loop_->run(*a_, inner_, H_);
    detail::difference_kernel<<<elementwise_blocks(n), 256, 0, st>>>(an.data(), th.data(),
                                                                     delta_.data(), n);
    check(cuda_status(cudaGetLastError(), "Δ launch"));
    collectives::counted<T> ct(*t_);
    const auto& co = o.collective;
    const std::size_t k = std::size_t(t_->size());
    if (device_sum_) {  // fp32 on the devices: Δ summed in place, then / k
      check(device_sum_(delta_.data(), n, st));
      check(cuda_status(cudaMemcpyAsync(mean_.data(), delta_.data(), n * sizeof(float),
                                        cudaMemcpyDeviceToDevice, st),
                        "mean copy"));
      detail::scale_kernel<<<elementwise_blocks(n), 256, 0, st>>>(mean_.data(), 1.0f / float(k), n);
      check(cuda_status(cudaGetLastError(), "mean scale launch"));
      traffic_.payload_bytes += 4 * n;
    } else if (!codec_) {  // fp32: Δ down, ring all-reduce on the host, the mean up
      host_.resize(n);
      check(download(std::as_const(delta_).view(), slice<float>(host_.data(), n), st, &log_));
      check(ctx.synchronize());
      if (auto s = collectives::allreduce_ring(ct, std::span<float>(host_), co); !s) return s;
      const float inv_k = 1.0f / float(k);
      for (auto& v : host_) v *= inv_k;
      check(upload(slice<const float>(host_.data(), n), mean_.view(), st, &log_));
      traffic_.payload_bytes += 4 * n;
    } else {
      if (auto s = gathered_mean(ct, ctx, co, k); !s) return s;
    }
    // θ ← anchor, then the outer Nesterov step from the mean Δ (outer::nesterov's formula).
    check(cuda_status(
        cudaMemcpyAsync(th.data(), an.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, st),
        "θ ← anchor"));
    check(nesterov_update(th.data(), a_->get(plane::outer_momentum).data(), mean_.data(), n,
                          outer_.momentum, outer_.lr, st));
    auto s = same_theta(ct, ctx, th, co);
    traffic_.bytes_sent += ct.bytes();
    ++traffic_.rounds;
    return s;
  }

  // The mean Δ through the codec: encode on the device, all-gather the sizes and payloads (as
  // train::detail::mean_delta does), decode every rank's on the device in rank order, sum, / k.
  status gathered_mean(collectives::counted<T>& ct, cuda_context& ctx,
                       const collectives::collective_options& o, std::size_t k) {
    const std::size_t n = mean_.size(), me = std::size_t(t_->rank());
    float* residual = codec_->error_feedback() ? a_->get(plane::residual).data() : nullptr;
    std::vector<std::byte> own;
    if (auto s = codec_->encode(ctx, delta_.data(), residual, own, &log_); !s) return s;
    traffic_.payload_bytes += own.size();
    std::vector<std::uint64_t> sizes(k, 0);
    sizes[me] = own.size();
    auto c = o;
    c.tag = o.tag + 2;
    if (auto s = collectives::all_gather(ct, std::span<std::uint64_t>(sizes), c); !s) return s;
    const std::size_t width = *std::max_element(sizes.begin(), sizes.end());
    std::vector<std::uint8_t> all(k * width, 0);
    std::memcpy(all.data() + me * width, own.data(), own.size());
    c.tag = o.tag + 3;
    if (auto s = collectives::all_gather(ct, std::span<std::uint8_t>(all), c); !s) return s;
    const cudaStream_t st = ctx.stream();
    check(cuda_status(cudaMemsetAsync(mean_.data(), 0, n * sizeof(float), st), "mean reset"));
    for (std::size_t w = 0; w < k; ++w) {
      const std::span<const std::byte> p(reinterpret_cast<const std::byte*>(all.data() + w * width),
                                         std::size_t(sizes[w]));
      if (auto s = codec_->decode(ctx, p, tmp_.data(), &log_); !s)
        return paco::error{s.error().code, "DiLoCo: the payload of rank " + std::to_string(w) +
                                               " does not decode: " + s.error().message};
      detail::add_kernel<<<elementwise_blocks(n), 256, 0, st>>>(mean_.data(), tmp_.data(), n);
      check(cuda_status(cudaGetLastError(), "mean add launch"));
    }
    detail::scale_kernel<<<elementwise_blocks(n), 256, 0, st>>>(mean_.data(), 1.0f / float(k), n);
    return cuda_status(cudaGetLastError(), "mean scale launch");
  }

  // Every rank's θ fingerprint (8 bytes down) all-reduced; mismatch when any differs.
  status same_theta(collectives::counted<T>& ct, cuda_context& ctx, slice<float, cuda> th,
                    const collectives::collective_options& o) {
    const cudaStream_t st = ctx.stream();
    check(cuda_status(cudaMemsetAsync(fingerprint_.data(), 0, 8, st), "fingerprint reset"));
    detail::fingerprint_kernel<<<elementwise_blocks(th.size()), 256, 0, st>>>(th.data(), th.size(),
                                                                              fingerprint_.data());
    check(cuda_status(cudaGetLastError(), "fingerprint launch"));
    std::uint64_t mine = 0;
    check(cuda_status(cudaMemcpyAsync(&mine, fingerprint_.data(), 8, cudaMemcpyDeviceToHost, st),
                      "fingerprint download"));
    log_.d2h_bytes += 8, ++log_.d2h_copies;
    check(ctx.synchronize());
    std::vector<std::uint64_t> all(std::size_t(t_->size()), 0);
    all[std::size_t(t_->rank())] = mine;
    auto c = o;
    c.tag = o.tag + 1;
    if (auto s = collectives::allreduce_ring(ct, std::span<std::uint64_t>(all), c); !s) return s;
    for (auto h : all)
      if (h != all[0])
        return {errc::mismatch,
                "DiLoCo replicas diverged: θ fingerprints differ after the outer "
                "step"};
    return {};
  }

  T* t_;
  inner_loop_cuda<M>* loop_;
  arena<cuda>* a_;
  optim::adamw inner_;
  int H_;
  outer::nesterov outer_;
  std::optional<device_codec> codec_;
  device_allreduce device_sum_;
  buffer<float, cuda> delta_, mean_, tmp_;
  buffer<unsigned long long, cuda> fingerprint_;
  std::vector<float> host_;
  train::diloco_traffic traffic_;
  transfer_log log_;
  long done_ = 0;
};

}  // namespace paco::kernels
