#pragma once
// round_planes<cuda, O>: the round loop's plane work (train/round_planes.hpp) with the replica on
// the device, so that train::round_loop runs every sync rule (blocking DiLoCo, Streaming DiLoCo,
// CO2, eager updates, the naïve delayed rule) with a kernels::learner_cuda. g, Δ, the mean, the
// outer state, the own last Δ and the error-feedback residual stay in device memory; the
// measuring, the outer step and the α mix are kernels on the learner's stream. A fragment's
// mean Δ is taken by its device_mean:
//   none (fp32)   Δ comes down (4 bytes an element), the ring all-reduce sums it on the host
//                 (train::detail::mean_delta, as a host rank does), the mean goes up
//   sum           fp32 summed in device memory (nccl_comm::allreducer(), nccl.cuh): nothing
//                 comes down but the fingerprint and the losses
//   codec         a device_codec encodes Δ + residual on the device; its payload (≈ n·bits/8
//                 bytes + scales) comes down, the ranks all-gather payloads
//                 (train::detail::all_gather_payloads, as a host rank does), every rank's is
//                 decoded and summed in rank order on the device
// plus 8 bytes per send (g's fingerprint, when the rule keeps g the same on every rank: σ = 0).
// transfers() counts these copies; the inner loop's own (batches, losses) are its loop's.
//
// The reduction runs on a stream of its own (a second cuda_context) that waits for the
// measurement, so with an overlapped rule it runs beside the next inner steps on the learner's
// stream; it synchronises before it lands. The fingerprint is Σ_i mix(bits(g_i), i) mod 2⁶⁴,
// computed on the device (any summation order gives the same value): every rank of a group is
// a device rank.
//
// Outer optimizers on the device: outer::nesterov (nesterov_update, the host's formula) and
// outer::sgd. Checkpoints (round_loop::open_checkpoints) are the host's only. NCCL sums of an
// overlapped rule run on the flight's thread while the inner steps run: NCCL asks that no other
// thread allocate device memory meanwhile when one process drives several GPUs (untested here:
// the one-GPU test runs one rank).
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "paco/arena_cuda.cuh"
#include "paco/codec_cuda.cuh"
#include "paco/context_cuda.cuh"
#include "paco/elementwise.cuh"
#include "paco/outer/nesterov.hpp"
#include "paco/outer/sgd.hpp"
#include "paco/train/round_planes.hpp"

namespace paco::kernels {

// A sum of device floats over the ranks, in place, enqueued on a stream (e.g. NCCL's).
using device_allreduce = std::function<status(float* data, std::size_t n, cudaStream_t stream)>;

// How one fragment's mean Δ is taken on the device: a codec, a device sum (fp32), or neither
// (fp32 through the host's ring all-reduce). Not both.
struct device_mean {
  std::optional<device_codec> codec;
  device_allreduce sum;
};

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
// u ← u + (fresh − own)·σ; own ← fresh (the host's expression, each operation rounded: no fused
// multiply-add; the host compiler may fuse, so the two agree bit for bit where products are
// exact, as in tests/gpu/test_diloco.cu's rules).
template <int = 0>
__global__ void own_share_kernel(float* __restrict__ u, const float* __restrict__ fresh,
                                 float* __restrict__ own, float share, std::size_t n) {
  PACO_EACH(i, n) {
    u[i] = __fadd_rn(u[i], __fmul_rn(__fsub_rn(fresh[i], own[i]), share));
    own[i] = fresh[i];
  }
}
// θ ← α·θ + (1 − α)·g, each operation rounded (as own_share_kernel).
template <int = 0>
__global__ void mix_kernel(float* __restrict__ th, const float* __restrict__ g, float al,
                           std::size_t n) {
  PACO_EACH(i, n) th[i] = __fadd_rn(__fmul_rn(al, th[i]), __fmul_rn(1.0f - al, g[i]));
}
// θ ← θ − η·u (outer::sgd), each operation rounded (as own_share_kernel).
template <int = 0>
__global__ void sgd_kernel(float* __restrict__ th, const float* __restrict__ u, float lr,
                           std::size_t n) {
  PACO_EACH(i, n) th[i] = __fsub_rn(th[i], __fmul_rn(lr, u[i]));
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

// Throws error_exception when the last launch failed.
inline void launched(const char* what) {
  cuda_status(cudaGetLastError(), what).throw_if_error();
}

}  // namespace detail

}  // namespace paco::kernels

namespace paco::train {

template <outer::OuterOptimizer O>
class round_planes<cuda, O> {
  static_assert(std::is_same_v<O, outer::nesterov> || std::is_same_v<O, outer::sgd>,
                "round_planes<cuda>: the device's outer optimizers are outer::nesterov and "
                "outer::sgd");

 public:
  using codec = kernels::device_mean;  // one per fragment, or none (fp32 through the host)

  // Errors: a fragment with both a codec and a device sum (invalid_argument); codecs neither
  // empty nor one per fragment, a codec of another size than its fragment (detail::codecs_fit).
  // Each names `rule`.
  static status check(const std::vector<codec>& codecs, const std::vector<fragment>& frags,
                      const std::string& rule) {
    std::vector<std::optional<std::size_t>> sizes;
    for (std::size_t p = 0; p < codecs.size(); ++p) {
      if (codecs[p].codec && codecs[p].sum)
        return {errc::invalid_argument,
                rule + ": fragment " + std::to_string(p) +
                    ": a device all-reduce carries fp32 Δ; a codec's payloads go over the "
                    "transport (give one or the other)"};
      sizes.push_back(codecs[p].codec ? std::optional(codecs[p].codec->size()) : std::nullopt);
    }
    return detail::codecs_fit(sizes, frags, rule);
  }

  // Requires: l is a kernels::learner_cuda (state() on the device, context() its stream) and
  // frags outlive the planes; frags cover its layout once; check(codecs, frags) is ok. Throws
  // error_exception when the device has no room for the buffers or no second stream.
  template <class L>
  round_planes(L& l, const std::vector<fragment>& frags, std::vector<codec> codecs, O outer,
               const sync_plan& plan)
      : a_(&l.state()),
        ctx_(&l.context()),
        flight_ctx_(kernels::cuda_context::make(l.context().device()).value_or_throw()),
        frags_(&frags),
        codecs_(std::move(codecs)),
        outer_(outer),
        plan_(plan) {
    try {
      a_->get(plane::anchor);
      std::size_t largest = 0;
      bool host_ring = codecs_.empty(), decodes = false;
      for (std::size_t p = 0; p < frags.size(); ++p) {
        const std::size_t n = frags[p].size();
        state_.emplace_back(outer_.state_size(n));
        own_.emplace_back(plan_.identical() ? 0 : n);
        const bool feedback =
            p < codecs_.size() && codecs_[p].codec && codecs_[p].codec->error_feedback();
        if (feedback && frags[p].spans.size() == 1) a_->get(plane::residual);
        residual_.emplace_back(feedback && frags[p].spans.size() > 1 ? n : 0);
        if (p < codecs_.size()) {
          host_ring = host_ring || (!codecs_[p].codec && !codecs_[p].sum);
          decodes = decodes || bool(codecs_[p].codec);
        }
        largest = std::max(largest, n);
      }
      for (auto* b : {&delta_, &fresh_, &mean_, &scratch_}) b->resize(largest);
      if (decodes) tmp_.resize(largest);
      if (host_ring) host_delta_.resize(largest), host_mean_.resize(largest);
      fingerprint_.resize(1);
    } catch (const std::bad_alloc&) {
      throw error_exception({errc::unsupported, "round_planes<cuda>: no device room for Δ"});
    }
    cuda_check(cudaEventCreateWithFlags(&measured_, cudaEventDisableTiming), "event create");
  }
  round_planes(const round_planes&) = delete;
  round_planes& operator=(const round_planes&) = delete;
  ~round_planes() {
    if (measured_) cudaEventDestroy(measured_);
  }

  void begin() { copy_plane(plane::param, plane::anchor); }
  void end() { copy_plane(plane::anchor, plane::param); }

  // g's fingerprint (8 bytes down; the learner's stream is synchronised).
  std::uint64_t fingerprint() {
    const cudaStream_t st = ctx_->stream();
    const auto g = a_->get(plane::anchor);
    cuda_check(cudaMemsetAsync(fingerprint_.data(), 0, 8, st), "fingerprint reset");
    kernels::detail::fingerprint_kernel<<<kernels::elementwise_blocks(g.size()), 256, 0, st>>>(
        g.data(), g.size(), fingerprint_.data());
    kernels::detail::launched("fingerprint launch");
    std::uint64_t h = 0;
    cuda_check(cudaMemcpyAsync(&h, fingerprint_.data(), 8, cudaMemcpyDeviceToHost, st),
               "fingerprint download");
    log_.d2h_bytes += 8, ++log_.d2h_copies;
    ctx_->synchronize().throw_if_error();
    return h;
  }

  void measure(int p) {
    const cudaStream_t st = ctx_->stream();
    const auto th = a_->get(plane::param), g = a_->get(plane::anchor);
    std::size_t at = 0;
    for (auto& s : frag(p).spans) {
      kernels::detail::difference_kernel<<<kernels::elementwise_blocks(s.size), 256, 0, st>>>(
          g.data() + s.offset, th.data() + s.offset, fresh_.data() + at, s.size);
      at += s.size;
    }
    kernels::detail::launched("Δ launch");
  }
  void clear_fresh() {
    cuda_check(cudaMemsetAsync(fresh_.data(), 0, fresh_.size() * sizeof(float), ctx_->stream()),
               "fresh reset");
  }

  // The flight's work: waits (on its own stream) for the measurement, then takes fragment p's
  // mean as its device_mean says, and synchronises its stream.
  template <net::Transport T>
  auto reduce(int p) {
    std::swap(delta_, fresh_);
    cuda_check(cudaEventRecord(measured_, ctx_->stream()), "measure event");
    return [this, p](collectives::counted<T>& ct, const collectives::collective_options& co,
                     std::size_t& payload) -> status {
      const cudaStream_t st = flight_ctx_.stream();
      cuda_check(cudaSetDevice(flight_ctx_.device()), "cudaSetDevice");  // the flight's thread
      cuda_check(cudaStreamWaitEvent(st, measured_, 0), "flight wait");
      const std::size_t n = frag(p).size();
      const codec* how = codecs_.empty() ? nullptr : &codecs_[std::size_t(p)];
      status s;
      if (how && how->codec)
        s = gathered_mean(ct, p, co, payload);
      else if (how && how->sum)
        s = device_sum(ct, *how, n, payload);
      else
        s = host_ring(ct, n, co, payload);
      // The flight's buffers are the learner's again once it lands: its stream is drained
      // on every exit (the first error wins).
      const status drained = flight_ctx_.synchronize();
      return s ? drained : s;
    };
  }

  void apply(int p, bool landed, bool with_fresh) {
    if (landed) book_flight();
    const cudaStream_t st = ctx_->stream();
    const std::size_t n = frag(p).size();
    const float share = plan_.own_share;
    if (!landed) cuda_check(cudaMemsetAsync(mean_.data(), 0, n * sizeof(float), st), "u reset");
    if (with_fresh && share != 0.0f) {
      kernels::detail::own_share_kernel<<<kernels::elementwise_blocks(n), 256, 0, st>>>(
          mean_.data(), fresh_.data(), own_[std::size_t(p)].data(), share, n);
      kernels::detail::launched("own share launch");
    }
    const auto th = a_->get(plane::param), g = a_->get(plane::anchor);
    const auto& spans = frag(p).spans;
    if (landed || share != 0.0f) {
      spans_copy(spans, g.data(), scratch_.data(), true);
      outer_step(scratch_.data(), mean_.data(), state_[std::size_t(p)].data(), n, st);
      spans_copy(spans, scratch_.data(), g.data(), false);
    }
    const float al = plan_.alpha;
    for (auto& s : spans) {
      if (al == 1.0f) continue;
      if (al == 0.0f) {
        cuda_check(cudaMemcpyAsync(th.data() + s.offset, g.data() + s.offset,
                                   s.size * sizeof(float), cudaMemcpyDeviceToDevice, st),
                   "θ ← g");
        continue;
      }
      kernels::detail::mix_kernel<<<kernels::elementwise_blocks(s.size), 256, 0, st>>>(
          th.data() + s.offset, g.data() + s.offset, al, s.size);
      kernels::detail::launched("α mix launch");
    }
  }

  // Waits for the learner's stream: the planes' work so far has happened (its errors named).
  void settle() { ctx_->synchronize().throw_if_error(); }

  // The round's own copies across PCIe (Δ or payloads down, the mean up, the fingerprints, the
  // decodes' bad-block counts), summed over the syncs that landed (a flight books its copies
  // when it lands: read this between run() calls or in on_round).
  const transfer_log& transfers() const noexcept { return log_; }

 private:
  static void cuda_check(cudaError_t e, const char* what) {
    kernels::cuda_status(e, what).throw_if_error();
  }
  void copy_plane(plane from, plane to) {
    const auto f = a_->get(from), t = a_->get(to);
    cuda_check(cudaMemcpyAsync(t.data(), f.data(), f.size_bytes(), cudaMemcpyDeviceToDevice,
                               ctx_->stream()),
               "plane copy");
  }
  // The spans of a plane to a fragment's end-to-end buffer (gather), or back.
  void spans_copy(const std::vector<path::level_span>& spans, const float* from, float* to,
                  bool gather) {
    std::size_t at = 0;
    for (auto& s : spans) {
      const float* src = gather ? from + s.offset : from + at;
      float* dst = gather ? to + at : to + s.offset;
      cuda_check(cudaMemcpyAsync(dst, src, s.size * sizeof(float), cudaMemcpyDeviceToDevice,
                                 ctx_->stream()),
                 "fragment copy");
      at += s.size;
    }
  }
  void outer_step(float* g, const float* u, float* state, std::size_t n, cudaStream_t st) {
    if constexpr (std::is_same_v<O, outer::nesterov>) {
      kernels::nesterov_update(g, state, u, n, outer_.momentum, outer_.lr, st).throw_if_error();
    } else {
      kernels::detail::sgd_kernel<<<kernels::elementwise_blocks(n), 256, 0, st>>>(g, u, outer_.lr,
                                                                                  n);
      kernels::detail::launched("outer sgd launch");
    }
  }
  const fragment& frag(int p) const { return (*frags_)[std::size_t(p)]; }
  void book_flight() {
    log_.d2h_bytes += flight_log_.d2h_bytes, log_.d2h_copies += flight_log_.d2h_copies;
    log_.h2d_bytes += flight_log_.h2d_bytes, log_.h2d_copies += flight_log_.h2d_copies;
    flight_log_ = {};
  }
  float* residual_of(int p) {
    const auto& f = frag(p);
    if (!codecs_[std::size_t(p)].codec->error_feedback()) return nullptr;
    if (f.spans.size() == 1) return a_->get(plane::residual).data() + f.spans[0].offset;
    return residual_[std::size_t(p)].data();
  }

  // fp32: Δ down, the host's ring mean, the mean up.
  template <class C>
  status host_ring(C& ct, std::size_t n, const collectives::collective_options& co,
                   std::size_t& payload) {
    const cudaStream_t st = flight_ctx_.stream();
    if (auto s = paco::download(slice<const float, cuda>(delta_.data(), n),
                                slice<float>(host_delta_.data(), n), st, &flight_log_);
        !s)
      return s;
    if (auto s = flight_ctx_.synchronize(); !s) return s;
    if (auto s = detail::mean_delta(ct, nullptr, slice<const float>(host_delta_.data(), n), {},
                                    slice<float>(host_mean_.data(), n), co, payload);
        !s)
      return s;
    return paco::upload(slice<const float>(host_mean_.data(), n),
                        slice<float, cuda>(mean_.data(), n), st, &flight_log_);
  }
  // fp32 on the devices: Δ summed in place, then / k.
  template <class C>
  status device_sum(C& ct, const codec& how, std::size_t n, std::size_t& payload) {
    const cudaStream_t st = flight_ctx_.stream();
    if (auto s = how.sum(delta_.data(), n, st); !s) return s;
    if (auto s =
            kernels::cuda_status(cudaMemcpyAsync(mean_.data(), delta_.data(), n * sizeof(float),
                                                 cudaMemcpyDeviceToDevice, st),
                                 "mean copy");
        !s)
      return s;
    kernels::detail::scale_kernel<<<kernels::elementwise_blocks(n), 256, 0, st>>>(
        mean_.data(), 1.0f / float(ct.size()), n);
    payload += 4 * n;
    return kernels::cuda_status(cudaGetLastError(), "mean scale launch");
  }
  // A codec: encode on the device, every rank's payload over the transport, decode each on the
  // device in rank order, sum, / k.
  template <class C>
  status gathered_mean(C& ct, int p, const collectives::collective_options& co,
                       std::size_t& payload) {
    auto& dc = *codecs_[std::size_t(p)].codec;
    const std::size_t n = dc.size();
    std::vector<std::byte> own;
    if (auto s = dc.encode(flight_ctx_, delta_.data(), residual_of(p), own, &flight_log_); !s)
      return s;
    payload += own.size();
    auto all = detail::all_gather_payloads(ct, own, co);
    if (!all) return all.error();
    const cudaStream_t st = flight_ctx_.stream();
    if (auto s = kernels::cuda_status(cudaMemsetAsync(mean_.data(), 0, n * sizeof(float), st),
                                      "mean reset");
        !s)
      return s;
    const std::size_t k = std::size_t(ct.size());
    for (std::size_t w = 0; w < k; ++w) {
      if (auto s = dc.decode(flight_ctx_, all->of(w), tmp_.data(), &flight_log_); !s)
        return paco::error{s.error().code, "DiLoCo: the payload of rank " + std::to_string(w) +
                                               " does not decode: " + s.error().message};
      kernels::detail::add_kernel<<<kernels::elementwise_blocks(n), 256, 0, st>>>(mean_.data(),
                                                                                  tmp_.data(), n);
      if (auto s = kernels::cuda_status(cudaGetLastError(), "mean add launch"); !s) return s;
    }
    kernels::detail::scale_kernel<<<kernels::elementwise_blocks(n), 256, 0, st>>>(
        mean_.data(), 1.0f / float(k), n);
    return kernels::cuda_status(cudaGetLastError(), "mean scale launch");
  }

  arena<cuda>* a_;
  kernels::cuda_context* ctx_;          // the learner's stream: measure, apply, fingerprint
  kernels::cuda_context flight_ctx_;    // the reduction's
  const std::vector<fragment>* frags_;  // the loop's
  std::vector<codec> codecs_;
  O outer_;
  sync_plan plan_;
  std::vector<buffer<float, cuda>> state_, own_, residual_;  // per fragment, as the host's
  buffer<float, cuda> delta_, mean_, fresh_, scratch_, tmp_;
  buffer<unsigned long long, cuda> fingerprint_;
  std::vector<float> host_delta_, host_mean_;  // fp32 through the host
  cudaEvent_t measured_ = nullptr;             // the learner's stream after a measurement
  transfer_log log_;         // the learner's thread's, and the flights' that landed
  transfer_log flight_log_;  // the flight's, until it lands
};

}  // namespace paco::train
