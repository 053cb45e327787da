// train/held_out.hpp and train/learning_curve.hpp: documents cut into training part and held-out
// tail; windowed learning curves.
#include <catch2/catch.hpp>

#include "paco/io/corpus.hpp"
#include "paco/train/held_out.hpp"
#include "paco/train/learning_curve.hpp"

using namespace paco;

TEST_CASE("hold_out_tails: documents longer than 2·tail hold out their last tail tokens",
          "[train][held_out]") {
  io::corpus c;
  c.docs.push_back({"a", '?', std::string(10, 'a'), "x"});  // 10 > 2·4: cut at 6
  c.docs.push_back({"b", '?', std::string(8, 'b'), "y"});   // 8 = 2·4: trains whole
  c.docs.push_back({"c", '?', "", "x"});                    // empty
  const auto h = train::hold_out_tails(c, 4);
  REQUIRE(h.size() == 3);
  REQUIRE(h.cut == std::vector<std::size_t>{6, 8, 0});
  REQUIRE(h.domain == std::vector<std::string>{"x", "y", "x"});
  REQUIRE(h.train(0).size() == 6);
  REQUIRE(h.tail(0).size() == 4);
  REQUIRE(h.tail(0)[0] == 'a');
  REQUIRE(h.tail(1).empty());
  REQUIRE(h.tail_tokens() == 4);
  REQUIRE(h.wholes()[1].size() == 8);
  const std::vector<float> f{1, 2, 3, 4, 5, 6};
  const auto r = h.routed(f, 2);
  REQUIRE(r.size() == 3);
  REQUIRE(r.train[0].data() == h.tokens[0].data());
  REQUIRE(r.tail[0].data() == h.tokens[0].data() + 6);
  REQUIRE(r.feature(2)[0] == 5.0f);
  // tail 0: every document whole
  const auto w = train::hold_out_tails(c, 0);
  REQUIRE(w.cut == std::vector<std::size_t>{10, 8, 0});
  REQUIRE(w.tail_tokens() == 0);
}

TEST_CASE("window_means: complete windows only, summed in order", "[train][learning_curve]") {
  const std::vector<double> l{1, 2, 3, 4, 5, 6, 7};
  REQUIRE(train::window_means(l, 3) == std::vector<double>{2.0, 5.0});
  REQUIRE(train::window_means(l, 1) == l);
  REQUIRE(train::window_means(l, 8).empty());
  const std::vector<double> t{0.1, 0.2, 0.3};
  REQUIRE(train::window_means(t, 3)[0] == ((0.1 + 0.2) + 0.3) / 3);
}
