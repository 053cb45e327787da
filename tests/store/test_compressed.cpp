// DiLoCo / DiPaCo with compressed pushes: the fp32 codec is the plain push bit for bit; an int8
// run's bytes are exactly the predicted wire bytes; the store service decodes to the same
// modules as the in-process store; a damaged payload is refused and changes nothing.
#include <catch2/catch.hpp>

#include <cstring>
#include <thread>

#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/store/store.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/dipaco_local.hpp"
#include "service_case.hpp"

using namespace paco;

namespace {

io::token_stream stream(std::uint64_t seed, std::size_t n = 3000) {
  return paco::testing::synthetic_stream(seed, n, 3, 9);
}

// A DiPaCo 2x2 run in one process; `comp` empty: plain fp32 pushes.
struct grid_run {
  nn::gpt model{{.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2}};
  arena<host> a0{model.layout()};
  std::vector<path::level_span> levels = *path::split_gpt_levels(model.layout(), 2, 2);
  path::path_plan plan = *path::path_plan::make(path::module_grid<2>::experts({2, 2}), levels);
  std::vector<io::token_stream> shards{stream(1), stream(2, 2000), stream(3), stream(4, 4000)};
  std::vector<train::worker_spec> ws;
  train::inner_config cfg{.batch = 2,
                          .ctx = 16,
                          .steps = 3,
                          .grad_clip = 1.0f,
                          .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 2, .total = 9}};
  static constexpr int rounds = 3;

  grid_run() {
    model.init(a0, 9);
    for (int p = 0; p < 4; ++p) ws.push_back({&shards[std::size_t(p)], 60u + std::uint64_t(p)});
  }
  std::vector<path::level_span> module_spans() const { return plan.module_spans(); }
  // Runs and returns the store's module hashes (and the store for more checks).
  std::unique_ptr<store::local_store<outer::nesterov>> run(const store::compression* comp) {
    auto st = std::make_unique<store::local_store<outer::nesterov>>(plan.module_table(),
                                                                    outer::nesterov{});
    train::init_modules(*st, plan, a0.get(plane::param).data());
    if (comp) REQUIRE(st->set_compression(*comp, model, module_spans()).ok());
    REQUIRE(train::run_local(*st, model, plan, ws, optim::adamw{.lr = 1e-2f}, cfg, rounds).ok());
    return st;
  }
};

store::compression comp_of(const char* text) {
  auto c = store::parse_compression(text);
  REQUIRE(c.ok());
  return *c;
}

}  // namespace

TEST_CASE("the fp32 codec path is bit-identical to the plain fp32 push", "[dipaco][compress]") {
  grid_run g;
  auto plain = g.run(nullptr);
  const auto fp32 = comp_of("fp32");
  auto coded = g.run(&fp32);
  REQUIRE(coded->encoded());
  for (int m = 0; m < 4; ++m) {
    REQUIRE(coded->store().round(m) == grid_run::rounds);
    REQUIRE(coded->store().hash(m) == plain->store().hash(m));
  }
  // The codec's header and level table are the only extra bytes.
  for (int w = 0; w < 4; ++w) {
    std::size_t extra = 0;
    auto c = store::make_codecs(fp32, g.model, {g.levels[0], g.levels[1]});
    REQUIRE(c.ok());
    for (auto& x : *c) extra += x.header_bytes();
    REQUIRE(coded->bytes_sent(w) == plain->bytes_sent(w) + grid_run::rounds * extra);
  }
}

TEST_CASE("int8 over local_store: bytes_sent equals the predicted wire bytes",
          "[dipaco][compress]") {
  grid_run g;
  const auto int8 = comp_of("int8");
  auto st = g.run(&int8);
  auto plain = g.run(nullptr);
  auto codecs = store::make_codecs(int8, g.model, {g.levels[0], g.levels[1]});
  REQUIRE(codecs.ok());
  std::size_t payload = 0, fp32 = 0;
  for (std::size_t l = 0; l < 2; ++l) {
    const auto& c = (*codecs)[l];
    std::size_t body = 0;
    for (auto& s : c.segments()) body += compress::quantize({.bits = 8}).wire_bytes(s.size(), 8);
    REQUIRE(c.payload_bytes() == c.header_bytes() + body);
    REQUIRE(c.header_bytes() == sizeof(compress::payload_header) + 8 * c.segments().size());
    payload += store::wire::push_bytes(c.payload_bytes());
    fp32 += store::wire::push_bytes(4 * g.levels[l].size);
  }
  for (int w = 0; w < 4; ++w) {
    REQUIRE(st->bytes_sent(w) == grid_run::rounds * payload);
    REQUIRE(plain->bytes_sent(w) == grid_run::rounds * fp32);
  }
  INFO("int8 sends " << double(fp32) / double(payload) << "x fewer bytes than fp32");
  REQUIRE(double(fp32) / double(payload) > 3.5);
  for (int m = 0; m < 4; ++m) REQUIRE(st->store().round(m) == grid_run::rounds);
}

TEST_CASE("DiPaCo 2x2 with int8 over the store service equals the in-process int8 run",
          "[dipaco][service][compress]") {
  auto world = net::inproc::world(5);
  paco::testing::dipaco_service_case([&](int rank, auto&& body) { body(world[std::size_t(rank)]); },
                                     5, comp_of("int8"));
}

TEST_CASE("lgreco:int over local_store: every push decodes, never more bytes than uniform int4",
          "[dipaco][compress][lgreco]") {
  grid_run g;
  auto c = comp_of("lgreco:int");
  c.lgreco_every = 1;  // re-choose after every round
  const auto int4 = comp_of("int4");
  auto st = g.run(&c);
  auto uniform = g.run(&int4);
  for (int m = 0; m < 4; ++m) REQUIRE(st->store().round(m) == grid_run::rounds);
  REQUIRE(st->history().size() == 4 * grid_run::rounds);
  for (auto& h : st->history()) REQUIRE(h.arrived == 2);  // no push was refused
  // The first round is int4 everywhere; later ones cost at most as much (the knapsack keeps
  // the default levels when nothing cheaper fits the budget).
  for (int w = 0; w < 4; ++w) {
    INFO("worker " << w << ": " << st->bytes_sent(w) << " vs int4 " << uniform->bytes_sent(w));
    REQUIRE(st->bytes_sent(w) <= uniform->bytes_sent(w));
  }
}

TEST_CASE("stores refuse codecs they cannot combine, naming the alternative",
          "[dipaco][compress]") {
  grid_run g;
  store::local_store<outer::nesterov> st(g.plan.module_table(), outer::nesterov{});
  for (const char* t : {"powersgd:4", "sign_prune:0.5"}) {
    auto s = st.set_compression(comp_of(t), g.model, g.module_spans());
    REQUIRE_FALSE(s.ok());
    REQUIRE(s.error().code == make_error_code(errc::unsupported));
    REQUIRE(s.error().message.find("train::round_loop") != std::string::npos);
  }
  REQUIRE_FALSE(st.encoded());
}

TEST_CASE("a damaged payload is refused by the store server and leaves the module unchanged",
          "[dipaco][service][compress]") {
  constexpr std::size_t n = 600;
  auto world = net::inproc::world(3);  // store + 2 DiLoCo workers on one module
  store::module_store<outer::sgd> store({{0, n, 2}}, outer::sgd{.lr = 1.0f},
                                        {.weight_by_shard = false});
  std::vector<float> theta0(n);
  for (std::size_t i = 0; i < n; ++i) theta0[i] = float(i % 13) * 0.25f;
  store.set(0, theta0);
  const auto h0 = store.hash(0);
  const auto int8 = comp_of("int8");
  auto make = [&] {
    auto c = compress::module_codec::make(int8.spec, compress::whole_span(n));
    REQUIRE(c.ok());
    return std::move(*c);
  };
  auto decoders = std::make_shared<std::vector<compress::module_codec>>();
  decoders->push_back(make());
  store::server server(world[0], store, {{1, {0}}, {2, {0}}},
                       {.round_timeout = std::chrono::milliseconds(20000), .codecs = decoders});
  std::thread st([&] { server.serve(); });
  auto delta = [&](int w) {
    std::vector<float> d(n);
    for (std::size_t i = 0; i < n; ++i) d[i] = float(w) * (float(i % 7) - 3.0f) * 0.5f;
    return d;
  };
  // Both workers' payloads (and what they decode to), encoded up front on this thread.
  std::vector<std::vector<std::byte>> payload(2);
  std::vector<std::vector<float>> sent(2, std::vector<float>(n));
  for (int w = 1; w <= 2; ++w) {
    auto codec = make();
    std::vector<float> d = delta(w), res(n, 0.0f);
    REQUIRE(
        codec.encode(slice<const float>(d.data(), n), slice<float>(res.data(), n), payload[w - 1])
            .ok());
    REQUIRE(codec.decode(payload[w - 1], slice<float>(sent[w - 1].data(), n)).ok());
  }
  std::vector<status> errs(2);
  auto finish = [&](store::client<net::inproc>& c, int w) {
    if (auto s = c.push_encoded(0, w, 0, payload[w - 1], 1.0); !s) return void(errs[w - 1] = s);
    if (auto s = c.wait_closed(0, 0, net::after(std::chrono::seconds(20))); !s)
      return void(errs[w - 1] = s);
    errs[w - 1] = c.bye();
  };
  store::client c1(world[1], store::store_layout{{0}}, 1);
  auto bad = payload[0];
  bad[bad.size() / 2] ^= std::byte{0x10};  // one flipped bit in the codes
  auto s = c1.push_encoded(0, 1, 0, bad, 1.0);
  REQUIRE_FALSE(s.ok());
  INFO(s.error().what());
  REQUIRE(s.error().code == make_error_code(errc::corrupt));
  REQUIRE(s.error().message.find("refused") != std::string::npos);
  const std::vector<std::byte> truncated(payload[0].begin(), payload[0].end() - 3);
  REQUIRE(c1.push_encoded(0, 1, 0, truncated, 1.0).error().code == make_error_code(errc::corrupt));
  REQUIRE(store.pushed(0) == 0);  // nothing was applied
  REQUIRE(store.round(0) == 0);
  REQUIRE(store.hash(0) == h0);
  // The same worker then pushes its good payload; the round closes with both.
  std::thread t2([&] {
    store::client c2(world[2], store::store_layout{{0}}, 2);
    finish(c2, 2);
  });
  finish(c1, 1);
  t2.join();
  st.join();
  for (auto& e : errs) REQUIRE(e.ok());
  REQUIRE(server.refusals().size() == 2);
  REQUIRE(server.refusals()[0].find("checksum") != std::string::npos);
  REQUIRE(server.refusals()[1].find("module 0 from worker 1") != std::string::npos);
  REQUIRE(server.history().size() == 1);
  REQUIRE(server.history()[0].arrived == 2);
  // θ = θ0 − mean of the two decoded payloads (outer sgd, lr 1).
  std::vector<float> got(n);
  store.pull(0, got);
  for (std::size_t i = 0; i < n; ++i) {
    const float want = theta0[i] - (0.5f * sent[0][i] + 0.5f * sent[1][i]);
    REQUIRE(got[i] == Approx(want).margin(1e-6));
  }
}
