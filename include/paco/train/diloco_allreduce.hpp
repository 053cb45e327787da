#pragma once
// diloco_allreduce: the mean of the ranks' Δ over an all-reduce — what the round loop
// (train/round_loop.hpp) reduces at every send, for k replicas joined by any Transport (a
// cluster over MPI, ranks over asio_tcp, threads over inproc). The mean is bit-identical on
// every rank (every rank adds in the same order), so replicas that apply it with the same
// deterministic outer step stay bit-identical; check_identical verifies it with a hash.
//
// The mean of Δ, by codec (a compress::module_codec over a fragment of the parameter plane):
//   none / fp32      ring all-reduce of the fp32 Δ (sum), / k
//   bf16, fp16       ring all-reduce of the 16-bit arrays, added in fp32 and rounded per hop
//   powersgd:R       two ring all-reduces (P, then Q; vectors ride in the first), decode
//   int8 … int2, topk, lgreco:*, sign_prune
//                    all-gather of the payload sizes, then of the payloads (each padded to the
//                    largest), every rank decodes all of them in rank order: mean (sign_prune:
//                    TIES merge, elected sign then the mean of the agreeing values)
// The error-feedback residual is the caller's (the round loop's: the learner's plane::residual).
//
// Cost per rank, n floats, k ranks: fp32 2(k−1)/k·4n; summed codecs 2(k−1)/k·(bytes of a
// summed array) per all-reduce (PowerSGD: two, of (Σ rows·r + vectors) and Σ cols·r floats);
// message codecs (k−1)·(largest payload) + 8(k−1) for the sizes; the hash check 16(k−1).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "paco/collectives/collectives.hpp"
#include "paco/collectives/counted.hpp"
#include "paco/compress/combine.hpp"
#include "paco/core/hash.hpp"
#include "paco/store/compression.hpp"
#include "paco/train/fragments.hpp"

namespace paco::train {

// What a rank's syncs moved, summed over them.
struct diloco_traffic {
  std::size_t bytes_sent = 0;     // bytes this rank sent: every collective, hash check included
  std::size_t payload_bytes = 0;  // bytes of this rank's encoded Δ (payload / arrays / rounds)
  long rounds = 0;
};

// Where the time of a rank that overlaps its all-reduces with inner steps went (CO2, eager
// updates, Streaming DiLoCo), summed over its rounds (seconds).
struct overlap_stats {
  double inner_s = 0;  // the inner steps
  double comm_s = 0;   // the all-reduces, in the background (mean Δ and hash check)
  double wait_s = 0;   // the rank waited for an all-reduce: the communication the inner steps
                       // did not hide (finish()'s wait included)
  // The fraction of communication time hidden behind the inner steps, 1 when nothing was sent.
  double hidden() const { return comm_s > 0 ? 1.0 - std::min(wait_s, comm_s) / comm_s : 1.0; }
};

// The codec of a sync of the whole plane: fragment_codecs of train::whole_plane, one segment
// per tensor. Errors: fragment_codecs'.
template <class Model>
result<compress::module_codec> diloco_codec(const store::compression& c, const Model& model) {
  auto v = fragment_codecs(c, model, whole_plane(model.layout()));
  if (!v) return v.error();
  return std::move((*v)[0]);
}

namespace detail {

// Every rank's payload, the same on every rank: the sizes all-gathered (tag + 2), then the
// payloads, each padded to the largest (tag + 3). Host and device message codecs share it.
struct gathered_payloads {
  std::vector<std::uint64_t> sizes;  // rank w's payload is sizes[w] bytes
  std::size_t width = 0;             // the largest
  std::vector<std::uint8_t> all;     // rank w's at w·width
  std::span<const std::byte> of(std::size_t w) const {
    return {reinterpret_cast<const std::byte*>(all.data() + w * width), std::size_t(sizes[w])};
  }
};
template <net::Transport T>
result<gathered_payloads> all_gather_payloads(T& t, std::span<const std::byte> own,
                                              const collectives::collective_options& o) {
  const std::size_t p = std::size_t(t.size()), me = std::size_t(t.rank());
  gathered_payloads g;
  g.sizes.assign(p, 0);
  g.sizes[me] = own.size();
  auto co = o;
  co.tag = o.tag + 2;
  if (auto s = collectives::all_gather(t, std::span<std::uint64_t>(g.sizes), co); !s)
    return s.error();
  g.width = *std::max_element(g.sizes.begin(), g.sizes.end());
  g.all.assign(p * g.width, 0);
  std::memcpy(g.all.data() + me * g.width, own.data(), own.size());
  co.tag = o.tag + 3;
  if (auto s = collectives::all_gather(t, std::span<std::uint8_t>(g.all), co); !s) return s.error();
  return g;
}

// mean Δ of a message codec: every rank's payload (all_gather_payloads), decoded in rank order.
// sign_prune: TIES merge instead of the mean.
template <net::Transport T>
status gathered_mean(T& t, compress::module_codec& codec, slice<const float> delta,
                     slice<float> residual, slice<float> mean,
                     const collectives::collective_options& o, std::size_t& payload) {
  std::vector<std::byte> own;
  if (auto s = codec.encode(delta, residual, own); !s) return s;
  payload += own.size();
  const std::size_t p = std::size_t(t.size());
  auto all = all_gather_payloads(t, own, o);
  if (!all) return all.error();
  auto decode = [&](std::size_t w, slice<float> out) -> status {
    if (auto s = codec.decode(all->of(w), out); !s)
      return paco::error{s.error().code, "DiLoCo: the payload of rank " + std::to_string(w) +
                                             " does not decode: " + s.error().message};
    return {};
  };
  const std::size_t n = mean.size();
  if (codec.spec().kind == compress::codec_kind::sign_prune) {  // elected sign, agreeing mean
    std::vector<float> scratch(3 * n);
    return compress::ties_merge_decoded(p, decode, mean,
                                        slice<float>(scratch.data(), scratch.size()));
  }
  std::vector<float> tmp(n);
  const slice<float> dec{tmp.data(), n};
  std::fill(mean.begin(), mean.end(), 0.0f);
  for (std::size_t w = 0; w < p; ++w) {
    if (auto s = decode(w, dec); !s) return s;
    for (std::size_t i = 0; i < n; ++i) mean[i] += tmp[i];
  }
  const float inv = 1.0f / float(p);
  for (auto& v : mean.span()) v *= inv;
  return {};
}

// Every rank holds the θ whose hash is h: an all-reduce of the ranks' 8-byte hashes (tag + 1).
// Errors: the collective's, or mismatch naming `what` if a hash differs.
template <net::Transport T>
status check_identical(T& t, std::uint64_t h, const collectives::collective_options& o,
                       const char* what = "DiLoCo") {
  std::vector<std::uint64_t> hashes(std::size_t(t.size()), 0);
  hashes[std::size_t(t.rank())] = h;
  auto co = o;
  co.tag = o.tag + 1;
  if (auto s = collectives::allreduce_ring(t, std::span<std::uint64_t>(hashes), co); !s) return s;
  for (auto x : hashes)
    if (x != hashes[0])
      return {errc::mismatch,
              std::string(what) + " replicas diverged: θ hashes differ after the outer step"};
  return {};
}

// check_identical on its own, every step within `deadline` from now; the bytes it sends are
// added to traffic.bytes_sent.
template <net::Transport T>
status check_identical_within(T& t, std::uint64_t h, std::chrono::steady_clock::duration deadline,
                              const char* what, diloco_traffic& traffic) {
  collectives::counted<T> ct(t);
  collectives::collective_options co;
  co.until = net::after(deadline);
  auto s = check_identical(ct, h, co, what);
  traffic.bytes_sent += ct.bytes();
  return s;
}

// The mean over the ranks of every rank's Δ, into mean: by the fp32 ring all-reduce when codec
// is null, else through the codec as the file comment says. residual: the error-feedback
// residual (empty when the codec keeps none). Requires: every rank calls it with the same codec
// spec and options; d, mean of the codec's size; mean does not alias d. Ensures: mean is
// bit-identical on every rank; payload_bytes grows by this rank's encoded bytes (4n for fp32).
// Errors: the collectives' and the codec's. Tags used: o.tag .. o.tag + 3 except o.tag + 1.
template <net::Transport T>
status mean_delta(T& t, compress::module_codec* codec, slice<const float> d, slice<float> res,
                  slice<float> y, const collectives::collective_options& co,
                  std::size_t& payload_bytes) {
  const std::size_t n = d.size();
  const auto k = std::size_t(t.size());
  if (codec == nullptr) {
    std::copy(d.begin(), d.end(), y.begin());
    if (auto s = collectives::allreduce_ring(t, std::span<float>(y.data(), n), co); !s) return s;
    const float inv_k = 1.0f / float(k);
    for (auto& v : y.span()) v *= inv_k;
    payload_bytes += 4 * n;
    return {};
  }
  if (codec->multi_round()) {  // PowerSGD
    std::vector<float> r0(codec->round_floats(0)), r1(codec->round_floats(1));
    if (auto s = codec->encode_round(0, d, res, {}, slice<float>(r0.data(), r0.size())); !s)
      return s;
    if (auto s = collectives::allreduce_ring(t, std::span<float>(r0), co); !s) return s;
    if (auto s = codec->encode_round(1, d, res, slice<const float>(r0.data(), r0.size()),
                                     slice<float>(r1.data(), r1.size()));
        !s)
      return s;
    auto c1 = co;
    c1.tag = co.tag + 2;
    if (auto s = collectives::allreduce_ring(t, std::span<float>(r1), c1); !s) return s;
    if (auto s = codec->decode_rounds(slice<const float>(r1.data(), r1.size()), k, y, res); !s)
      return s;
    payload_bytes += (r0.size() + r1.size()) * sizeof(float);
    return {};
  }
  if (codec->summed_bytes() > 0) {  // fp32, bf16, fp16
    const std::size_t bytes = codec->summed_bytes();
    std::vector<float> buf((bytes + sizeof(float) - 1) / sizeof(float));  // aligned for u16/f32
    const std::span<std::byte> b{reinterpret_cast<std::byte*>(buf.data()), bytes};
    if (auto s = codec->encode_summed(d, res, b); !s) return s;
    status s;
    if (codec->spec().kind == compress::codec_kind::identity) {
      s = collectives::allreduce_ring(t, std::span<float>(buf.data(), n), co);
    } else {
      const compress::half_sum op{codec->spec().kind == compress::codec_kind::bf16
                                      ? compress::half_format::bf16
                                      : compress::half_format::fp16};
      s = collectives::allreduce_ring(
          t, std::span<std::uint16_t>(reinterpret_cast<std::uint16_t*>(buf.data()), n), co, op);
    }
    if (!s) return s;
    if (auto st = codec->decode_summed(b, k, y); !st) return st;
    payload_bytes += bytes;
    return {};
  }
  return gathered_mean(t, *codec, d, res, y, co, payload_bytes);
}

}  // namespace detail

}  // namespace paco::train
