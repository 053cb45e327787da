#pragma once
// The Catch2 form of the service case: ranks as threads of this process, each given its
// transport endpoint by with_rank(r, body).

#include <catch2/catch.hpp>

#include <thread>

#include "service_setup.hpp"

namespace paco::testing {

// comp (optional): the workers push payloads of this codec and both stores decode them; rule
// (optional): every worker runs this sync rule.
template <class WithRank>
void dipaco_service_case(WithRank&& with_rank, int ranks,
                         std::optional<store::compression> comp = std::nullopt,
                         std::optional<train::sync_choice> rule = std::nullopt) {
  REQUIRE(ranks == service_setup::ranks);
  auto owned = comp ? std::make_unique<service_setup>(*comp) : std::make_unique<service_setup>();
  service_setup& s = *owned;
  s.rule = rule;
  if (rule && rule->get_if<train::streaming>()) s.cfg.steps = 4;  // H a multiple of the 2 levels
  const auto ref = s.reference_hashes();
  REQUIRE(ref.size() == 4);
  std::vector<status> errs(ranks);
  std::vector<std::size_t> sent(ranks);
  std::vector<std::thread> th;
  for (int r = 0; r < ranks; ++r)
    th.emplace_back(
        [&, r] { with_rank(r, [&](auto& t) { errs[r] = s.run_rank(t, r, &sent[r]); }); });
  for (auto& t : th) t.join();
  for (auto& e : errs) REQUIRE(e.ok());
  for (int m = 0; m < 4; ++m) {
    REQUIRE(s.store.round(m) == service_setup::rounds);
    REQUIRE(s.store.hash(m) == ref[std::size_t(m)]);  // bit-identical θ
  }
  REQUIRE(sent[1] == s.expected_bytes());
}

}  // namespace paco::testing
