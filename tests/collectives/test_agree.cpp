// collectives/agree.hpp over threads as ranks (inproc), p in {1, 2, 3, 5}: agreement passes;
// a field that differs on one rank fails on every rank with the same message naming the rank,
// the field and both values; a field missing or extra on one rank is named; a silent or dead
// rank turns into an error within the deadline on every other rank; agree_ok carries one
// rank's failure to every rank.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "paco/collectives/agree.hpp"
#include "world.hpp"

using namespace paco;
using namespace std::chrono_literals;
using collectives::agree_field;

namespace {

const int agree_worlds[] = {1, 2, 3, 5};  // ranks per run

std::vector<agree_field> fingerprint() {
  return {{"--d", "64"},     {"--inner", "60"}, {"--compress", "bf16"},
          {"--lr", "0.002"}, {"--seed", "1"},   {"--resume", "no"}};
}

// Runs agree on p ranks, rank r passing fields_of(r); returns each rank's status.
template <class F>
std::vector<status> run_agree(int p, F fields_of, net::clock::duration budget = 10s) {
  std::vector<status> out(std::size_t(p), status{});
  paco::testing::inproc_world::run(p, [&](net::inproc& t) {
    const auto f = fields_of(t.rank());
    out[std::size_t(t.rank())] =
        collectives::agree(t, std::span<const agree_field>(f), {.until = net::after(budget)});
  });
  return out;
}

}  // namespace

TEST_CASE("agree: the same fields on every rank pass on every rank", "[collectives][agree]") {
  for (int p : agree_worlds) {
    auto st = run_agree(p, [](int) { return fingerprint(); });
    for (int r = 0; r < p; ++r) {
      INFO("p=" << p << " rank " << r << ": " << st[std::size_t(r)].error().what());
      REQUIRE(st[std::size_t(r)].ok());
    }
    // The order of the fields does not matter (they are matched by key), nor does an empty list.
    st = run_agree(p, [](int r) {
      auto f = fingerprint();
      if (r % 2 == 1) std::reverse(f.begin(), f.end());
      return f;
    });
    for (auto& s : st) REQUIRE(s.ok());
    st = run_agree(p, [](int) { return std::vector<agree_field>{}; });
    for (auto& s : st) REQUIRE(s.ok());
  }
}

TEST_CASE("agree: a field that differs on one rank fails on every rank, named with both values",
          "[collectives][agree]") {
  for (int p : agree_worlds) {
    if (p == 1) continue;
    for (int odd = 1; odd < p; ++odd) {
      auto st = run_agree(p, [&](int r) {
        auto f = fingerprint();
        if (r == odd) f[2].value = "int8";
        return f;
      });
      const std::string want =
          "rank " + std::to_string(odd) + "'s --compress is int8 but rank 0's is bf16";
      for (int r = 0; r < p; ++r) {
        const auto& s = st[std::size_t(r)];
        INFO("p=" << p << " odd rank " << odd << ", rank " << r << ": " << s.error().what());
        REQUIRE(!s.ok());
        REQUIRE(s.error().code == errc::mismatch);
        REQUIRE(s.error().message == want);  // the same sentence on every rank
      }
    }
  }
}

TEST_CASE("agree: rank 0 differing is named on every rank; the lowest rank first, more counted",
          "[collectives][agree]") {
  for (int p : {3, 5}) {
    auto st = run_agree(p, [](int r) {
      auto f = fingerprint();
      if (r == 0) f[1].value = "30";  // every other rank differs from rank 0
      if (r == 0) f[4].value = "2";
      return f;
    });
    const std::string want = "rank 1's --inner is 60 but rank 0's is 30 (and " +
                             std::to_string(2 * (p - 1) - 1) + " more differences)";
    for (auto& s : st) {
      REQUIRE(!s.ok());
      REQUIRE(s.error().message == want);
    }
  }
}

TEST_CASE("agree: a different field count names the missing or extra field on every rank",
          "[collectives][agree]") {
  for (int p : agree_worlds) {
    if (p == 1) continue;
    const int odd = p - 1;
    auto fewer = run_agree(p, [&](int r) {
      auto f = fingerprint();
      if (r == odd) f.pop_back();  // no --resume
      return f;
    });
    const std::string who = "rank " + std::to_string(odd);
    for (auto& s : fewer) {
      INFO(s.error().what());
      REQUIRE(s.error().code == errc::mismatch);
      REQUIRE(s.error().message ==
              who + " has no --resume (rank 0's is no; " + who + " lists 5 fields, rank 0 6)");
    }
    auto more = run_agree(p, [&](int r) {
      auto f = fingerprint();
      if (r == odd) f.push_back({"--tau", "2"});
      return f;
    });
    for (auto& s : more) {
      INFO(s.error().what());
      REQUIRE(s.error().code == errc::mismatch);
      REQUIRE(s.error().message ==
              who + "'s --tau (2) is not on rank 0 (" + who + " lists 7 fields, rank 0 6)");
    }
  }
}

TEST_CASE("agree: a silent or dead rank is an error on every other rank within the deadline",
          "[collectives][agree]") {
  for (bool silent : {false, true})
    for (int p : {2, 3, 5}) {
      const auto budget = 300ms;
      const int victim = p / 2;
      std::vector<status> st(std::size_t(p), status{});
      std::vector<double> took(std::size_t(p), 0.0);
      paco::testing::inproc_world::run(p, [&](net::inproc& t) {
        const int r = t.rank();
        if (r == victim) {
          if (!silent) t.close();  // crashed: peers see peer_lost
          return;                  // silent: never sends (peers time out)
        }
        const auto f = fingerprint();
        const auto t0 = net::clock::now();
        st[std::size_t(r)] =
            collectives::agree(t, std::span<const agree_field>(f), {.until = t0 + budget});
        took[std::size_t(r)] = std::chrono::duration<double>(net::clock::now() - t0).count();
      });
      for (int r = 0; r < p; ++r) {
        if (r == victim) continue;
        const auto& s = st[std::size_t(r)];
        INFO("silent=" << silent << " p=" << p << " rank " << r << " took " << took[std::size_t(r)]
                       << " s: " << s.error().what());
        REQUIRE(!s.ok());
        REQUIRE(s.error().message.rfind("agree: ", 0) == 0);
        REQUIRE(took[std::size_t(r)] < 2 * 0.3);
      }
    }
}

TEST_CASE("agree: a list longer than agree_max_bytes is refused on every rank, the rank named",
          "[collectives][agree]") {
  for (int p : {2, 3}) {
    auto st = run_agree(p, [&](int r) {
      auto f = fingerprint();
      if (r == p - 1) f.push_back({"--huge", std::string(collectives::agree_max_bytes, 'x')});
      return f;
    });
    for (auto& s : st) {
      REQUIRE(s.error().code == errc::too_large);
      REQUIRE(s.error().message.find("agree: rank " + std::to_string(p - 1) + " sends ") == 0);
    }
  }
}

TEST_CASE("agree_ok: one rank's failure stops every rank, naming the rank and its error",
          "[collectives][agree]") {
  for (int p : agree_worlds) {
    std::vector<status> all_ok(std::size_t(p), status{});
    paco::testing::inproc_world::run(p, [&](net::inproc& t) {
      all_ok[std::size_t(t.rank())] = collectives::agree_ok(t, status{});
    });
    for (auto& s : all_ok) REQUIRE(s.ok());
    if (p == 1) continue;
    // Ranks p-1 and (p > 2) 1 fail; the lowest of them is named everywhere else.
    std::vector<status> st(std::size_t(p), status{});
    paco::testing::inproc_world::run(p, [&](net::inproc& t) {
      const int r = t.rank();
      status mine;
      if (r == p - 1 || (p > 2 && r == 1))
        mine = status{errc::not_found, "no checkpoint 'ck/rank-" + std::to_string(r) + "'"};
      st[std::size_t(r)] = collectives::agree_ok(t, mine);
    });
    const int f = p > 2 ? 1 : p - 1;
    for (int r = 0; r < p; ++r) {
      const auto& s = st[std::size_t(r)];
      INFO("p=" << p << " rank " << r << ": " << s.error().what());
      REQUIRE(s.error().code == errc::not_found);
      if (r == f || r == p - 1)  // a failed rank returns its own error
        REQUIRE(s.error().message == "no checkpoint 'ck/rank-" + std::to_string(r) + "'");
      else
        REQUIRE(s.error().message == "rank " + std::to_string(f) + ": no checkpoint 'ck/rank-" +
                                         std::to_string(f) + "'");
    }
  }
}

TEST_CASE("agree: serialise and parse are inverse; damaged lists do not parse",
          "[collectives][agree]") {
  const auto f = fingerprint();
  const auto b = collectives::detail::serialise(f);
  auto back = collectives::detail::parse(b);
  REQUIRE(back);
  REQUIRE(*back == f);
  for (std::size_t cut : {std::size_t(0), std::size_t(3), b.size() - 1})
    REQUIRE_FALSE(collectives::detail::parse(std::span<const std::byte>(b.data(), cut)));
  auto longer = b;
  longer.push_back(std::byte{0});
  REQUIRE_FALSE(collectives::detail::parse(longer));
  REQUIRE(collectives::join_fields(std::vector<agree_field>{{"a", "1"}, {"--b", "x:2"}}) ==
          "a=1 --b=x:2");
}
