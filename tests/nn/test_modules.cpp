// check_module over every module, in float and double; the Module concept against its archetype
// (testing/archetypes.hpp) and against types that lack a member.
#include <catch2/catch.hpp>

#include "paco/nn/nn.hpp"
#include "paco/testing/archetypes.hpp"
#include "paco/testing/check_module.hpp"

using namespace paco;
using namespace paco::nn;

namespace {

template <class T, class M>
void require_module_ok(const M& m, dims d, double tol, int vocab) {
  auto r = testing::check_module<T>(m, d, {.vocab = vocab});
  INFO(r.detail);
  CHECK(r.forward_writes_all);
  CHECK(r.backward_accumulates);
  CHECK(r.max_err_theta < tol);
  CHECK(r.max_err_x < tol);
}

template <class M>
void both_precisions(const M& m, dims d, int vocab = 0) {
  SECTION("double") {
    require_module_ok<double>(m, d, 1e-6, vocab);
  }
  SECTION("float") {
    require_module_ok<float>(m, d, 3e-2, vocab);
  }
}

// A module without backward, one that cannot be copied, and one that computes in double only
// (the concept asks for float).
struct module_without_backward {
  std::size_t param_count() const;
  int in_width() const;
  int out_width() const;
  std::size_t cache_size(dims) const;
  std::size_t scratch_bytes(dims) const;
  void init(float*, rng&) const;
  void forward(const float*, const float*, float*, float*, dims, context&) const;
};
struct uncopyable_module : testing::module_archetype {
  uncopyable_module() = default;
  uncopyable_module(const uncopyable_module&) = delete;
};
struct double_only_module {
  std::size_t param_count() const;
  int in_width() const;
  int out_width() const;
  std::size_t cache_size(dims) const;
  std::size_t scratch_bytes(dims) const;
  void init(double*, rng&) const;
  void forward(const double*, const double*, double*, double*, dims, context&) const;
  void backward(const double*, const double*, const double*, double*, double*, const double*, dims,
                context&) const;
};

}  // namespace

TEST_CASE("linear passes check_module", "[nn]") {
  both_precisions(linear{.in = 5, .out = 7, .init_std = 0.5f}, {2, 3});
}
TEST_CASE("linear without bias passes check_module", "[nn]") {
  both_precisions(linear{.in = 4, .out = 3, .bias = false, .init_std = 0.5f}, {1, 5});
}
TEST_CASE("layer_norm passes check_module", "[nn]") {
  both_precisions(layer_norm{.C = 6}, {2, 3});
}
TEST_CASE("gelu passes check_module", "[nn]") {
  both_precisions(gelu{.C = 9}, {2, 2});
}
TEST_CASE("embedding passes check_module", "[nn]") {
  both_precisions(embedding{.V = 11, .ctx = 5, .C = 4, .init_std = 0.5f}, {2, 5});
}
TEST_CASE("causal_attention passes check_module", "[nn]") {
  both_precisions(causal_attention{.C = 8, .NH = 2, .init_std = 0.4f, .proj_init_std = 0.4f},
                  {2, 5});
}
TEST_CASE("causal_attention with several causal tiles passes check_module", "[nn]") {
  both_precisions(
      causal_attention{.C = 8, .NH = 2, .init_std = 0.4f, .proj_init_std = 0.4f, .tile = 2},
      {2, 7});
}
TEST_CASE("causal_attention tiling does not change the result", "[nn]") {
  causal_attention one{.C = 8, .NH = 2, .init_std = 0.4f, .proj_init_std = 0.4f, .tile = 64};
  causal_attention tiled = one;
  tiled.tile = 3;
  dims d{2, 10};
  rng r(4);
  std::vector<double> th(one.param_count()), x(d.rows() * 8), dy(x.size());
  one.init(th.data(), r);
  for (auto& v : x) v = r.normal();
  for (auto& v : dy) v = r.normal();
  context ctx;
  ctx.reserve(one.scratch_bytes(d) + 4096);
  std::vector<double> c1(one.cache_size(d)), c2(c1.size()), y1(x.size()), y2(x.size());
  one.forward(th.data(), x.data(), y1.data(), c1.data(), d, ctx);
  tiled.forward(th.data(), x.data(), y2.data(), c2.data(), d, ctx);
  for (std::size_t i = 0; i < y1.size(); ++i) REQUIRE(y1[i] == Approx(y2[i]).epsilon(1e-12));
  std::vector<double> dx1(x.size()), dx2(x.size()), dt1(th.size()), dt2(th.size());
  one.backward(th.data(), x.data(), dy.data(), dx1.data(), dt1.data(), c1.data(), d, ctx);
  tiled.backward(th.data(), x.data(), dy.data(), dx2.data(), dt2.data(), c2.data(), d, ctx);
  for (std::size_t i = 0; i < dx1.size(); ++i) REQUIRE(dx1[i] == Approx(dx2[i]).epsilon(1e-10));
  for (std::size_t i = 0; i < dt1.size(); ++i)
    REQUIRE(dt1[i] == Approx(dt2[i]).margin(1e-12).epsilon(1e-10));
}
TEST_CASE("lm_head passes check_module", "[nn]") {
  both_precisions(lm_head{.C = 6, .V = 10, .init_std = 0.5f}, {2, 3});
}
TEST_CASE("residual, seq and repeat pass check_module", "[nn]") {
  using blk = residual<seq<layer_norm, linear>>;
  blk b{seq<layer_norm, linear>(layer_norm{.C = 6}, linear{.in = 6, .out = 6, .init_std = 0.4f})};
  SECTION("residual of seq") {
    both_precisions(b, {2, 3});
  }
  SECTION("repeat of 3") {
    both_precisions(repeat<blk>{.block = b, .n = 3}, {2, 3});
  }
  SECTION("seq starting from tokens") {
    seq<embedding, layer_norm, lm_head> s(embedding{.V = 13, .ctx = 4, .C = 6, .init_std = 0.5f},
                                          layer_norm{.C = 6},
                                          lm_head{.C = 6, .V = 13, .init_std = 0.5f});
    both_precisions(s, {2, 4}, 13);
  }
}
TEST_CASE("transformer block passes check_module", "[nn]") {
  both_precisions(make_block(8, 2, 16, 0.3f, 0.3f), {2, 4});
}

TEST_CASE("the Module concept rejects what is not a module", "[nn]") {
  struct not_a_module {
    int in_width() const { return 1; }
  };
  static_assert(!Module<not_a_module>);
  static_assert(!Module<int>);
  static_assert(Module<residual<linear>>);
  static_assert(Module<seq<linear, gelu>>);
  static_assert(Module<repeat<transformer_block>>);
  static_assert(!Module<module_without_backward>);
  static_assert(!Module<uncopyable_module>);
  static_assert(!Module<double_only_module>);
  static_assert(!Module<testing::model_archetype>);  // a trainable Model is not a Module
  SUCCEED();
}

TEST_CASE("the module archetype is enough for check_module and the composites", "[nn]") {
  using archetype = testing::module_archetype;
  static_assert(Module<seq<archetype, archetype>> && Module<residual<archetype>> &&
                Module<repeat<archetype>>);
  const archetype m{.width = 3};
  auto require_ok = [](const auto& module) {
    const auto r = testing::check_module<float>(module, {2, 4});
    INFO(r.detail);
    CHECK(r.forward_writes_all);
    CHECK(r.backward_accumulates);
    CHECK(r.max_err_x < 3e-2);
  };
  require_ok(m);
  require_ok(seq<archetype, archetype>(m, m));
  require_ok(residual<archetype>{m});
  require_ok(repeat<archetype>{.block = m, .n = 3});
}
