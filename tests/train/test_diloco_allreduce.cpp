// DiLoCo over an all-reduce with a codec, threads as ranks (inproc): every codec keeps the
// replicas bit-identical (the round loop's hash check passes every round); the fp32 codec equals
// the plain all-reduce bit for bit; the traffic the loop reports is what the rank sent.
#include <catch2/catch.hpp>

#include <thread>

#include "paco/collectives/counted.hpp"
#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/round_loop.hpp"

using namespace paco;

namespace {

io::token_stream diloco_stream(std::uint64_t seed, std::size_t n = 3000) {
  return paco::testing::synthetic_stream(seed, n, 7, 5);
}

struct diloco_case {
  static constexpr int ranks = 3, rounds = 3;
  nn::gpt model{{.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2}};
  arena<host> a0{model.layout()};
  std::vector<path::level_span> levels = *path::split_gpt_levels(model.layout(), 2, 1);
  std::vector<io::token_stream> shards{diloco_stream(21), diloco_stream(22), diloco_stream(23)};
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 3,
                          .grad_clip = 1.0f,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 1, .total = 9}};
  diloco_case() { model.init(a0, 6); }

  struct outcome {
    std::vector<std::vector<float>> theta;  // per rank
    std::vector<status> errs;
    std::vector<train::diloco_traffic> traffic;
    std::vector<std::size_t> counted;
  };
  // spec null: no codec (the plain fp32 ring).
  outcome run(const char* spec) {
    auto world = net::inproc::world(ranks);
    outcome o{std::vector<std::vector<float>>(ranks), std::vector<status>(ranks),
              std::vector<train::diloco_traffic>(ranks), std::vector<std::size_t>(ranks)};
    std::vector<std::thread> th;
    for (int r = 0; r < ranks; ++r)
      th.emplace_back([&, r] {
        train::path_worker<nn::gpt, optim::adamw> w(
            r, model, levels, {0}, optim::adamw{.lr = 1e-2f}, cfg, shards[r], 40u + r);
        auto p = w.state().get(plane::param);
        std::copy(a0.get(plane::param).begin(), a0.get(plane::param).end(), p.begin());
        collectives::counted<net::inproc> ct(world[r]);  // the reference: every byte sent
        std::vector<compress::module_codec> codecs;
        if (spec) {
          auto c = store::parse_compression(spec, /*lgreco_every*/ 1);
          if (!c) return void(o.errs[r] = c.error());
          auto codec = train::diloco_codec(*c, model);
          if (!codec) return void(o.errs[r] = codec.error());
          codecs.push_back(std::move(*codec));
        }
        train::round_loop<collectives::counted<net::inproc>,
                          train::path_worker<nn::gpt, optim::adamw>, outer::nesterov,
                          train::blocking>
            loop(ct, w, outer::nesterov{}, {}, {}, std::move(codecs));
        o.errs[r] = loop.run(rounds, std::chrono::seconds(30));
        o.traffic[r] = loop.traffic();
        o.counted[r] = ct.bytes();
        o.theta[r].assign(p.begin(), p.end());
      });
    for (auto& t : th) t.join();
    return o;
  }
};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

}  // namespace

static_assert(net::Transport<collectives::counted<net::inproc>>);

TEST_CASE("blocking DiLoCo with a codec keeps replicas bit-identical, summed or gathered",
          "[diloco][compress]") {
  diloco_case c;
  const auto plain = c.run(nullptr);
  for (auto& e : plain.errs) REQUIRE(e.ok());
  for (const char* spec : {"fp32", "bf16", "int8", "int4", "lgreco:int", "topk:0.05",
                           "sign_prune:0.5", "powersgd:2", "int8+noef"}) {
    INFO("codec " << spec);
    const auto o = c.run(spec);
    for (auto& e : o.errs) {
      INFO((e.ok() ? std::string("ok") : e.error().what()));
      REQUIRE(e.ok());  // includes the replicas' hash check of every round
    }
    for (int r = 1; r < diloco_case::ranks; ++r) REQUIRE(o.theta[r] == o.theta[0]);
    for (int r = 0; r < diloco_case::ranks; ++r) {
      REQUIRE(o.traffic[r].rounds == diloco_case::rounds);
      REQUIRE(o.traffic[r].bytes_sent == o.counted[r]);  // measured, exactly what was sent
      REQUIRE(o.traffic[r].payload_bytes > 0);
    }
    if (std::string(spec) == "fp32") {
      REQUIRE(o.theta[0] == plain.theta[0]);  // the fp32 codec is the plain all-reduce
      REQUIRE(o.counted[0] == plain.counted[0]);
    } else {
      const std::vector<float> theta0(c.a0.get(plane::param).begin(), c.a0.get(plane::param).end());
      const double moved = max_diff(plain.theta[0], theta0),
                   off = max_diff(o.theta[0], plain.theta[0]);
      INFO("max |θ_codec − θ_fp32| = " << off << ", max |θ_fp32 − θ0| = " << moved);
      REQUIRE(max_diff(o.theta[0], theta0) > 0);  // it trained
      if (std::string(spec) == "bf16" || std::string(spec) == "int8")
        REQUIRE(off < 0.05 * moved);  // close to the fp32 run
    }
  }
}

TEST_CASE("blocking DiLoCo traffic: gathered codecs send (k-1) payloads, summed ones 2(k-1)/k",
          "[diloco][compress]") {
  diloco_case c;
  const int k = diloco_case::ranks;
  const auto fp32 = c.run("fp32"), int8 = c.run("int8"), psgd = c.run("powersgd:2");
  auto codec = train::diloco_codec(*store::parse_compression("int8"), c.model);
  REQUIRE(codec.ok());
  const std::size_t n = c.model.layout().total();
  const std::size_t hashes = collectives::allreduce_ring.cost(8 * k, k).bytes;
  // int8: payload sizes (8 bytes per rank) and the payloads, each forwarded k − 1 times.
  REQUIRE(int8.traffic[0].payload_bytes == diloco_case::rounds * codec->payload_bytes());
  REQUIRE(int8.counted[0] ==
          diloco_case::rounds * ((k - 1) * 8 + (k - 1) * codec->payload_bytes() + hashes));
  // fp32: one ring all-reduce of Δ (cost() is exact up to one element per step).
  const std::size_t ar = collectives::allreduce_ring.cost(4 * n, k).bytes;
  REQUIRE(fp32.counted[0] <= diloco_case::rounds * (ar + hashes));
  REQUIRE(fp32.counted[0] + diloco_case::rounds * 4 * 2 * (k - 1) >=
          diloco_case::rounds * (ar + hashes));
  // PowerSGD: two all-reduces whose payloads are smaller than the fp32 Δ.
  auto pc = train::diloco_codec(*store::parse_compression("powersgd:2"), c.model);
  REQUIRE(pc.ok());
  REQUIRE(pc->compressed_segments() > 0);
  REQUIRE(psgd.traffic[0].payload_bytes ==
          diloco_case::rounds * 4 * (pc->round_floats(0) + pc->round_floats(1)));
  REQUIRE(psgd.counted[0] < fp32.counted[0]);
}
