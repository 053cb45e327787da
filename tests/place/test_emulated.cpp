// place/scaled.hpp, placement_file.hpp, replay.hpp: DT-FM scenarios scaled to one machine, the
// placement file, and the as-modelled replay of a placement over a Transport.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "paco/net/inproc.hpp"
#include "paco/place/place.hpp"
#include "paco/place/placement_file.hpp"
#include "paco/place/replay.hpp"
#include "paco/place/scaled.hpp"

using namespace paco;
using namespace paco::place;

TEST_CASE("scaled scenarios: every emulated transfer takes s times its modelled time",
          "[place][emulated]") {
  const auto sc = make_scaled_scenario("world8").value_or_throw();
  REQUIRE(sc.size() == 8);
  REQUIRE(sc.net.devices[0].site == "Oregon");
  REQUIRE(sc.net.devices[4].site == "Tokyo");
  // §7.4: Oregon → Tokyo carries one activation in 7.304 s modelled, 0.7304 s at s = 1/10.
  const auto l = sc.link(0, 4);
  const double emulated = l.latency_s + double(sc.pp_bytes()) / l.rate_bytes_per_s;
  CHECK(sc.net.transfer_s(0, 4, sc.load.c_pp_gb) == Approx(7.304).epsilon(1e-3));
  CHECK(emulated == Approx(0.1 * sc.net.transfer_s(0, 4, sc.load.c_pp_gb)).epsilon(1e-6));
  CHECK(sc.pp_bytes() == 460204);  // 0.4712 GB × 1e9 / 1024
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      if (i != j) {
        const auto e = sc.link(i, j);
        const double gb = 0.01;
        CHECK(e.latency_s + gb * 1e9 * sc.scale.f / e.rate_bytes_per_s ==
              Approx(sc.scale.s * sc.net.transfer_s(i, j, gb)).epsilon(1e-9));
      }
  CHECK(make_scaled_scenario("regional8").value_or_throw().net.devices[7].site == "Ohio");
  CHECK_FALSE(make_scaled_scenario("moon8"));
  CHECK_FALSE(make_scaled_scenario("world8", {.s = 0, .f = 1}));
  CHECK_FALSE(make_scaled_scenario("world8", {}, 3, 2));  // 6 ≠ 8 devices
}

TEST_CASE("a placement's predicted cost from its own pipelines equals the cost model's",
          "[place][emulated][known-answer]") {
  for (const char* name : {"world8", "regional8"}) {
    const auto sc = make_scaled_scenario(name).value_or_throw();
    const auto m = cost_model::make(sc.net, sc.load).value_or_throw();
    auto ours = gcma(m, {.population = 20, .trials = 200, .seed = 3}).value_or_throw();
    const auto pg = placement_of(m, sc.net, sc.load, ours.best_order, true, name, "gcma");
    const auto best = m.evaluate(ours.best_order);
    CHECK(pg.dp_s == Approx(best.dp_s).epsilon(1e-12));
    CHECK(pg.pp_s == Approx(best.pp_s).epsilon(1e-12));
    CHECK(pg.total_s == Approx(best.total_s).epsilon(1e-12));
    const auto rank = rank_order_baseline(m);
    const auto pr = placement_of(m, sc.net, sc.load, rank.order, false, name, "rank_order");
    CHECK(pr.total_s == Approx(rank.cost_s).epsilon(1e-12));
    CHECK(pr.pipelines[1] == std::vector<int>{1, 3, 5, 7});  // member j of every stage
    // GCMA's placement is never predicted slower than rank order's.
    CHECK(pg.total_s <= pr.total_s + 1e-12);
  }
}

TEST_CASE("placement files: written, read back, refused when they do not fit",
          "[place][emulated]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("paco_placement_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const auto sc = make_scaled_scenario("world8").value_or_throw();
  const auto m = cost_model::make(sc.net, sc.load).value_or_throw();
  const auto p =
      placement_of(m, sc.net, sc.load, rank_order_baseline(m).order, false, "world8", "rank_order");
  REQUIRE(write_placement(dir / "p.json", p).ok());
  auto back = read_placement(dir / "p.json", 8, 4, 2);
  REQUIRE(back);
  CHECK(back->pipelines == p.pipelines);
  CHECK(back->total_s == p.total_s);
  CHECK(back->where(5) == std::pair<int, int>{1, 2});
  // Another world size or degrees: refused, naming the field.
  CHECK_THAT(read_placement(dir / "p.json", 16).error().what(), Catch::Contains("placement.n"));
  CHECK_THAT(read_placement(dir / "p.json", 8, 2, 4).error().what(),
             Catch::Contains("placement.d_pp"));
  auto twice = p;
  twice.pipelines[1][3] = 0;
  REQUIRE(write_placement(dir / "twice.json", twice).ok());
  CHECK_THAT(read_placement(dir / "twice.json").error().what(),
             Catch::Contains("pipelines[1][3] = 0: the device is placed twice"));
  auto out = p;
  out.pipelines[0][0] = 9;
  REQUIRE(write_placement(dir / "out.json", out).ok());
  CHECK_THAT(read_placement(dir / "out.json").error().what(), Catch::Contains("not a device 0..7"));
  std::ofstream(dir / "junk.json") << "{\"format\": \"something else\"}";
  CHECK(read_placement(dir / "junk.json").error().code == make_error_code(errc::corrupt));
  std::ofstream(dir / "short.json") << "{\"format\": \"paco-placement-1\", \"n\": 8}";
  CHECK_THAT(read_placement(dir / "short.json").error().what(),
             Catch::Contains("placement.scenario is missing"));
  CHECK(read_placement(dir / "none.json").error().code == make_error_code(errc::not_found));
  fs::remove_all(dir);
}

TEST_CASE("the as-modelled replay moves a placement's traffic hop by hop on every rank",
          "[place][emulated]") {
  // 2 stages × 2 pipelines over inproc (unshaped: what is checked is the exchange, not time).
  placement p{"t", "manual", 4, 2, 2, {{0, 2}, {1, 3}}, 0, 0, 0};
  REQUIRE(validate_placement(p, 4).ok());
  auto data = net::inproc::world(4), control = net::inproc::world(4);
  std::vector<result<replay_times>> got(4, error(errc::cancelled, "not run"));
  std::vector<std::thread> th;
  for (int r = 0; r < 4; ++r)
    th.emplace_back([&, r] {
      for (long it = 0; it < 3; ++it)
        got[std::size_t(r)] = replay_as_modelled(data[std::size_t(r)], control[std::size_t(r)], p,
                                                 {.pp_bytes = 1000, .dp_bytes = 4000}, it);
    });
  for (auto& t : th) t.join();
  for (const auto& g : got) {
    REQUIRE(g);
    CHECK(g->forward_hops.size() == 1);
    CHECK(g->backward_hops.size() == 1);
    CHECK(g->total_s() >= 0);
    CHECK(g->forward_s == got[0]->forward_s);  // every rank reports the same times
  }
  // A device missing: the others fail by the deadline, naming the phase.
  auto d2 = net::inproc::world(4), c2 = net::inproc::world(4);
  std::vector<status> errs(3);
  std::vector<std::thread> th2;
  for (int r = 0; r < 3; ++r)
    th2.emplace_back([&, r] {
      auto t = replay_as_modelled(
          d2[std::size_t(r)], c2[std::size_t(r)], p,
          {.pp_bytes = 10, .dp_bytes = 40, .timeout = std::chrono::milliseconds(300)}, 0);
      errs[std::size_t(r)] = t ? status{} : status(t.error());
    });
  for (auto& t : th2) t.join();
  for (const auto& e : errs) CHECK_FALSE(e.ok());
}
