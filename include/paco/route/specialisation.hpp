#pragma once
// specialisation: do a routed model's paths specialise? From every path's nats on every scored
// document (route::per_path_nll), the path the router chose for each and each document's label
// (a domain, a genre), it gives per domain each path's bits/byte and how many documents the
// router sends to / would best send to each path, the oracle best-path bound and how often the
// router picks a document's best path. Nothing is scored here: the caller's one scorer did.
// print_specialisation writes it as a table, one line per domain; specialisation_json as JSON.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"
#include "paco/route/evaluate.hpp"

namespace paco::route {

struct specialisation {
  std::vector<std::string> domains;            // sorted, each once
  std::vector<std::vector<nll>> nats;          // [domain][path]: summed over its documents
  std::vector<std::vector<int>> routed, best;  // [domain][path]: documents routed to / best on
  nll oracle;                                  // every document by its best path
  int router_picks_best = 0;                   // documents whose routed path is their best
  std::size_t documents = 0;
  // Each path's bits/byte on domain d's documents.
  std::vector<double> bits(std::size_t d) const {
    std::vector<double> b;
    for (auto& n : nats[d]) b.push_back(n.bits_per_token());
    return b;
  }
};

// Requires: per.size() == routed.size() == domain.size(); every per[j] has the same number of
// paths P ≥ 1 and routed[j] in [0, P) (checked: throws error_exception).
inline specialisation specialisation_of(const std::vector<std::vector<nll>>& per,
                                        const std::vector<int>& routed,
                                        const std::vector<std::string>& domain) {
  PACO_ASSERT(per.size() == routed.size() && per.size() == domain.size(),
              "one routed path and one domain per document");
  specialisation s;
  s.documents = per.size();
  if (per.empty()) return s;
  const std::size_t P = per[0].size();
  s.domains = domain;
  std::sort(s.domains.begin(), s.domains.end());
  s.domains.erase(std::unique(s.domains.begin(), s.domains.end()), s.domains.end());
  s.nats.assign(s.domains.size(), std::vector<nll>(P));
  s.routed.assign(s.domains.size(), std::vector<int>(P, 0));
  s.best = s.routed;
  const auto best = best_paths(per);
  for (std::size_t j = 0; j < per.size(); ++j) {
    PACO_ASSERT(per[j].size() == P && routed[j] >= 0 && std::size_t(routed[j]) < P,
                "a document scored by another number of paths, or routed outside them");
    const std::size_t d = std::size_t(
        std::lower_bound(s.domains.begin(), s.domains.end(), domain[j]) - s.domains.begin());
    s.oracle += per[j][std::size_t(best[j])];
    s.router_picks_best += best[j] == routed[j];
    ++s.routed[d][std::size_t(routed[j])];
    ++s.best[d][std::size_t(best[j])];
    for (std::size_t p = 0; p < P; ++p) s.nats[d][p] += per[j][p];
  }
  return s;
}

// Writes to `out`: how often the router picks the best path and the oracle's bits/byte, then
// per domain (first 28 characters of its name) each path's bits/byte (4 decimals) and, in
// parentheses, the documents routed to it. `name` heads the lines; `docs` names the documents.
inline void print_specialisation(std::FILE* out, const specialisation& s, const std::string& name,
                                 const std::string& docs) {
  std::fprintf(out,
               "%s: the router picks a document's best path for %d of %zu; the oracle best "
               "path scores %.4f bpb\n",
               name.c_str(), s.router_picks_best, s.documents, s.oracle.bits_per_token());
  std::fprintf(out,
               "%s: bits/byte of each path (columns) on each domain's %s documents, and how "
               "many documents the router sends to each path:\n",
               name.c_str(), docs.c_str());
  for (std::size_t d = 0; d < s.domains.size(); ++d) {
    std::fprintf(out, "  %-28s", s.domains[d].substr(0, 28).c_str());
    for (std::size_t p = 0; p < s.nats[d].size(); ++p)
      std::fprintf(out, " %7.4f (%2d)", std::round(s.nats[d][p].bits_per_token() * 1e4) / 1e4,
                   s.routed[d][p]);
    std::fprintf(out, "\n");
  }
}

// Ensures: {"oracle_bpb", "router_picks_best", "documents", "domains": {name: {"bpb": [per
// path], "routed": [per path], "best": [per path]}}}, bits/byte rounded to 4 decimals.
inline nlohmann::ordered_json specialisation_json(const specialisation& s) {
  auto round4 = [](double x) { return std::round(x * 1e4) / 1e4; };
  nlohmann::ordered_json domains = nlohmann::ordered_json::object();
  for (std::size_t d = 0; d < s.domains.size(); ++d) {
    std::vector<double> bpb;
    for (double b : s.bits(d)) bpb.push_back(round4(b));
    domains[s.domains[d]] = {{"bpb", bpb}, {"routed", s.routed[d]}, {"best", s.best[d]}};
  }
  return {{"oracle_bpb", round4(s.oracle.bits_per_token())},
          {"router_picks_best", s.router_picks_best},
          {"documents", s.documents},
          {"domains", domains}};
}

}  // namespace paco::route
