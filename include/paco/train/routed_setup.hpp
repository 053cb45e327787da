#pragma once
// routed_setup: what every row of a routed comparison shares (DiPaCo §2.3–2.4, its Table 1): a
// corpus's training documents with held-out tails (the router's data), its evaluation documents
// scored after their routing prefix, the base model θ0 (pretrained once, or loaded; also the
// router's frozen feature extractor), every document's prefix features under θ0, and a k-means
// router fit on the training features with its shards (top 1) and overlapping top-n sets.
//
//   auto s = train::make_routed_setup(model, corpus, io::split::test, {.prefix = 32}, pretrain);
//   auto t = train::train_paths(model, plan, s->theta0, s->kmeans_shards, inner, cfg);
//   route::routed_nll(model, route::theta_pointers(t->theta), s->scored.spans,
//                     s->kmeans_routes, rule, ws);
//   train::train_routed(model, plan, s->theta0, s->docs, s->kmeans_top, inner, rcfg, ws);

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/io/batches.hpp"
#include "paco/io/corpus.hpp"
#include "paco/route/assign.hpp"
#include "paco/route/features.hpp"
#include "paco/route/kmeans.hpp"
#include "paco/route/routing_rules.hpp"
#include "paco/train/base_model.hpp"
#include "paco/train/held_out.hpp"
#include "paco/train/routing.hpp"

namespace paco::train {

struct routed_setup_config {
  std::size_t router_bytes = 1024;  // tail of each training document held out for the router
  int prefix = 32;                  // routing prefix (tokens): features read it, scoring follows
  int k = 4;                        // k-means paths
  int overlap = 2;                  // n of kmeans_top: each training document's top-n paths
  std::uint64_t seed = 1;           // the base model's init and k-means++
  base_checkpoint base{};           // the base model's cache (empty file: always pretrain)
};

// Pretrains the base model in `a` (its parameters init(seed) there) on `stream`: every training
// document's training part.
using pretrain_fn = std::function<void(arena<host>& a, const io::token_stream& stream)>;

// Holds spans into its own documents and features: move-only, so they stay valid.
struct routed_setup {
  held_out_docs train;                     // the training split, tails of router_bytes held out
  held_out_docs eval;                      // the evaluation split, whole
  io::token_stream train_stream;           // every training document's training part, in order
  base_model base;                         // whether θ0 was loaded or pretrained (and saved)
  std::vector<float> theta0;               // the base model's parameters
  int dim = 0;                             // features per document: the model's width
  std::vector<float> train_features;       // (train.size(), dim): each training document's prefix
  routed_docs docs;                        // train's routed view, with train_features
  route::prefixed_spans scored;            // the evaluation documents, each after its prefix
  std::vector<std::string> scored_domain;  // per scored span: its document's domain
  std::vector<float> eval_features;        // (scored.spans.size(), dim)
  route::kmeans_router kmeans;             // k paths, fit on train_features
  std::vector<std::vector<int>> kmeans_sets;    // per training document: {its k-means path}
  std::vector<std::vector<int>> kmeans_top;     // per training document: its top-overlap paths
  std::vector<io::token_stream> kmeans_shards;  // per k-means path: its documents (kmeans_sets)
  std::vector<int> kmeans_routes;               // per scored span: its k-means path

  routed_setup() = default;
  routed_setup(routed_setup&&) = default;
  routed_setup& operator=(routed_setup&&) = default;

  // Training documents whose k-means path is p.
  std::size_t kmeans_documents(int p) const {
    return std::size_t(
        std::count_if(kmeans_sets.begin(), kmeans_sets.end(), [&](auto& s) { return s[0] == p; }));
  }
  // Writes one line to `out`: "<corpus>: <n> training documents (<MB> MB for training, <MB> MB
  // held out for the router), <n> <split> documents" (MB: millions of byte tokens).
  void print_documents(std::FILE* out, const std::string& corpus, const std::string& split) const {
    std::fprintf(out,
                 "%s: %zu training documents (%.2f MB for training, %.2f MB held out for the "
                 "router), %zu %s documents\n",
                 corpus.c_str(), train.size(), train_stream.ids.size() / 1e6,
                 train.tail_tokens() / 1e6, eval.size(), split.c_str());
  }
  // Writes one line to `out`: "k-means shards (documents / MB):" and each path's documents and
  // shard tokens in millions.
  void print_kmeans_shards(std::FILE* out) const {
    std::fprintf(out, "k-means shards (documents / MB):");
    for (std::size_t k = 0; k < kmeans_shards.size(); ++k)
      std::fprintf(out, " %zu: %zu / %.2f", k, kmeans_documents(int(k)),
                   kmeans_shards[k].ids.size() / 1e6);
    std::fprintf(out, "\n");
  }
};

// Builds the setup from `c`'s train split and its `eval` split: θ0 by load_or_pretrain(model,
// cfg.base, cfg.seed, pretrain on train_stream); features by route::prefix_features(model, θ0,
// whole documents, cfg.prefix); kmeans_router::fit(train_features, {.k, .seed}).
// Requires: model a train::LanguageModel with ctx ≥ cfg.prefix; 1 ≤ cfg.overlap ≤ cfg.k.
// Ensures: kmeans_sets[i] == kmeans.rank(docs.feature(i), 1); kmeans_top[i] ==
// kmeans.rank(docs.feature(i), overlap); kmeans_shards == shards_of(docs, kmeans_sets, k);
// kmeans_routes[j] == kmeans.route(eval_features row j); scored == after_prefix(eval, prefix).
// Errors: io::check_splits' (an empty split); kmeans_router::fit's (fewer documents than k).
template <LanguageModel M>
result<routed_setup> make_routed_setup(const M& model, const io::corpus& c, io::split eval,
                                       const routed_setup_config& cfg,
                                       const pretrain_fn& pretrain) {
  if (auto s = io::check_splits(c); !s) return s.error();
  routed_setup s;
  s.train = hold_out_tails(c.subset(io::split::train), cfg.router_bytes);
  s.eval = hold_out_tails(c.subset(eval), 0);
  s.docs = s.train.routed();
  s.train_stream = shards_of(s.docs, std::vector<std::vector<int>>(s.train.size(), {0}), 1)[0];
  arena<host> a(model.layout());
  s.base = load_or_pretrain(model, a, cfg.base, cfg.seed,
                            [&](arena<host>& b) { pretrain(b, s.train_stream); });
  s.theta0.assign(a.get(plane::param).begin(), a.get(plane::param).end());
  s.scored = route::after_prefix(s.eval.wholes(), std::size_t(cfg.prefix));
  std::vector<std::span<const std::int32_t>> scored_docs;
  for (auto i : s.scored.doc) {
    scored_docs.push_back(s.eval.whole(i));
    s.scored_domain.push_back(s.eval.domain[i]);
  }
  s.dim = model.width();
  s.train_features = route::prefix_features(model, s.theta0.data(), s.train.wholes(), cfg.prefix);
  s.eval_features = route::prefix_features(model, s.theta0.data(), scored_docs, cfg.prefix);
  auto km = route::kmeans_router::fit(s.train_features, int(s.train.size()), s.dim,
                                      {.k = cfg.k, .seed = cfg.seed});
  if (!km) return km.error();
  s.kmeans = std::move(*km);
  s.docs.features = s.train_features;
  s.docs.dim = s.dim;
  s.kmeans_sets = top_sets(s.kmeans, s.docs, 1);
  s.kmeans_top = top_sets(s.kmeans, s.docs, cfg.overlap);
  s.kmeans_shards = shards_of(s.docs, s.kmeans_sets, cfg.k);
  s.kmeans_routes = route::route_rows(s.kmeans, s.eval_features, s.dim);
  return s;
}

}  // namespace paco::train
