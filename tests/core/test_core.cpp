#include <catch2/catch.hpp>

#include <set>

#include "paco/core/core.hpp"
#include "paco/core/stats.hpp"

using namespace paco;

TEST_CASE("param_layout aligns every module to 64 bytes and sums sizes", "[core]") {
  param_layout l;
  auto a = l.add("embed", 3);
  auto b = l.add("block0", 17);
  auto c = l.add("head", 16);
  REQUIRE(l.count() == 3);
  for (auto id : {a, b, c}) REQUIRE(l.entry(id).offset % param_layout::alignment == 0);
  REQUIRE(l.entry(b).offset >= l.entry(a).offset + 3);
  REQUIRE(l.entry(c).offset >= l.entry(b).offset + 17);
  REQUIRE(l.used() == 36);
  REQUIRE(l.total() % param_layout::alignment == 0);
  REQUIRE(l.total() >= l.entry(c).offset + 16);
  REQUIRE(l.find("block0") == b);
  REQUIRE(!l.find("nope"));
}

TEST_CASE("arena planes share the layout and start zeroed", "[core]") {
  param_layout l;
  l.add("a", 5);
  auto id = l.add("b", 7);
  arena<host> ar(l);
  REQUIRE(!ar.has(plane::grad));
  auto g = ar.get(plane::grad, id);
  REQUIRE(ar.has(plane::grad));
  REQUIRE(g.size() == 7);
  for (float v : g) REQUIRE(v == 0.0f);
  g[3] = 2.0f;
  REQUIRE(ar.get(plane::grad)[l.entry(id).offset + 3] == 2.0f);
  REQUIRE(reinterpret_cast<std::uintptr_t>(g.data()) % 64 == 0);
  ar.zero(plane::grad);
  REQUIRE(g[3] == 0.0f);
  // Planes are independent.
  ar.get(plane::param, id)[0] = 1.0f;
  REQUIRE(ar.get(plane::grad, id)[0] == 0.0f);
}

TEST_CASE("buffer is aligned, zeroed, copyable and movable", "[core]") {
  buffer<float> b(33);
  REQUIRE(reinterpret_cast<std::uintptr_t>(b.data()) % 64 == 0);
  for (float v : b) REQUIRE(v == 0.0f);
  b[5] = 4.0f;
  buffer<float> c = b;
  REQUIRE(c[5] == 4.0f);
  buffer<float> d = std::move(b);
  REQUIRE(d[5] == 4.0f);
  REQUIRE(b.size() == 0);
}

TEST_CASE("slice views, sub-slices and const conversion", "[core]") {
  float xs[6] = {0, 1, 2, 3, 4, 5};
  slice<float> s(xs, 6);
  auto t = s.sub(2, 3);
  REQUIRE(t.size() == 3);
  REQUIRE(t[0] == 2.0f);
  slice<const float> c = t;
  REQUIRE(c[2] == 4.0f);
  REQUIRE(c.size_bytes() == 12);
  tensor_view<float, 2> m{xs, {2, 3}};
  REQUIRE(m(1, 2) == 5.0f);
  REQUIRE(m.size() == 6);
}

TEST_CASE("rng is deterministic per seed and split streams differ", "[core]") {
  rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) REQUIRE(a() == b());
  REQUIRE(a() != c());
  rng s1 = a.split(1), s2 = a.split(2);
  REQUIRE(s1() != s2());
  // below() stays in range and hits every value.
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    auto v = a.below(7);
    REQUIRE(v < 7);
    seen.insert(v);
  }
  REQUIRE(seen.size() == 7);
  // normal(): mean ≈ 0, variance ≈ 1.
  double m = 0, v = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = a.normal();
    m += x;
    v += x * x;
  }
  m /= n;
  v = v / n - m * m;
  REQUIRE(std::abs(m) < 0.01);
  REQUIRE(std::abs(v - 1.0) < 0.02);
}

TEST_CASE("result and error carry a code and a message", "[core]") {
  result<int> ok = 3;
  REQUIRE(ok.ok());
  REQUIRE(*ok == 3);
  result<int> bad(errc::invalid_argument, "field lr must be in (0, 1], got -1");
  REQUIRE(!bad.ok());
  REQUIRE(bad.error().code == errc::invalid_argument);
  REQUIRE(bad.error().what().find("field lr") != std::string::npos);
  REQUIRE_THROWS_AS(std::move(bad).value_or_throw(), error_exception);
  status s;
  REQUIRE(s.ok());
  status e(errc::io, "cannot open x");
  REQUIRE(!e.ok());
  REQUIRE(std::error_code(errc::timeout).category().name() == std::string("paco"));
}

TEST_CASE("edit_distance and closest_name: the nearest name to a mistyped one", "[core]") {
  // Textbook distances: kitten → sitting is 3 substitutions/insertions; a swap of two adjacent
  // letters is one edit; from nothing, one insertion per letter.
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("trian", "train") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("same", "same") == 0);
  const std::vector<std::string> keys = {"train.steps", "train.seed", "dipaco.rounds",
                                         "launch.round_timeout_s"};
  CHECK(closest_name("trian.steps", keys) == std::optional<std::string>("train.steps"));
  CHECK(closest_name("dipaco.round", keys) == std::optional<std::string>("dipaco.rounds"));
  CHECK(closest_name("train.sed", keys) == std::optional<std::string>("train.seed"));
  // Too far from every name to be a typo of one: no suggestion.
  CHECK(closest_name("model.vocab", keys) == std::nullopt);
  CHECK(closest_name("x", keys) == std::nullopt);
}

TEST_CASE("recent_median: the lower or upper middle of the last values in its window", "[core]") {
  paco::stats::recent_median lo(3, paco::stats::recent_median::lower),
      hi(3, paco::stats::recent_median::upper);
  CHECK(lo.empty());
  CHECK(lo.value() == 0.0);
  for (double v : {5.0, 1.0}) lo.add(v), hi.add(v);
  CHECK(lo.value() == 1.0);  // {1, 5}
  CHECK(hi.value() == 5.0);
  lo.add(3.0), hi.add(3.0);  // {1, 3, 5}
  CHECK(lo.value() == 3.0);
  CHECK(hi.value() == 3.0);
  lo.add(9.0), hi.add(9.0);  // 5 leaves: {1, 3, 9}
  CHECK(lo.value() == 3.0);
  lo.add(7.0);  // {3, 7, 9}
  CHECK(lo.value() == 7.0);
  CHECK(paco::stats::recent_median::of({4, 2, 8, 6}, paco::stats::recent_median::lower) == 4.0);
  CHECK(paco::stats::recent_median::of({4, 2, 8, 6}, paco::stats::recent_median::upper) == 6.0);
}
