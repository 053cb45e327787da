#pragma once
// New text through a run: the router the run kept (prepare wrote it into routing.json) picks a
// path from the base model's prefix features, and that path, as the store's checkpoint holds it,
// scores the text with the one scorer (sliding windows of ctx bytes, stride ctx/2; every byte
// after the first a target). What `--score FILE …` prints, and what an exported run lets any
// program do without paco (job/export.hpp writes the same router as router.json).
//
//   run_router    the run's router: k-means centroids over D features, or one path
//   score_texts   every file routed and scored

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/io/json_read.hpp"
#include "paco/io/tokenizer.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/run_files.hpp"
#include "paco/nn/gemm.hpp"
#include "paco/route/evaluate.hpp"
#include "paco/route/features.hpp"
#include "paco/route/kmeans.hpp"
#include "paco/store/store.hpp"

namespace paco::job {

// A run's router: route(z) = argmin_i ‖z − c_i‖² over its centroids (k-means), or path 0.
struct run_router {
  int prefix = 32;  // the bytes whose features route a text
  std::optional<route::kmeans_router> kmeans;
  int route(const float* z) const { return kmeans ? kmeans->route(z) : 0; }
};

// The router in routing.json for features of `dim` floats. Errors: not_found when the run was
// prepared before routers were kept (prepare it again); corrupt when the entry is malformed.
inline result<run_router> router_of(const json& routing, int dim) {
  if (!routing.contains("router"))
    return error(errc::not_found,
                 "this run's routing.json keeps no router (it was prepared by an older paco): "
                 "start the run over to route new text");
  const json& r = routing["router"];
  if (!r.is_object() || !r.contains("kind") || !r.contains("prefix"))
    return error(errc::corrupt, "routing.json: its router entry is not one");
  auto prefix = io::json_int<int>(r["prefix"], "routing.json: router.prefix", 0);
  if (!prefix) return prefix.error();
  run_router out;
  out.prefix = *prefix;
  if (r["kind"] == "single") return out;
  if (r["kind"] != "kmeans" || !r.contains("k") || !r.contains("dim") || !r.contains("centroids") ||
      r["dim"] != dim || !r["centroids"].is_array())
    return error(errc::corrupt, "routing.json: its router is not k-means over " +
                                    std::to_string(dim) + " features");
  auto k_read = io::json_int<int>(r["k"], "routing.json: router.k", 1);
  if (!k_read) return k_read.error();
  const int k = *k_read;
  for (const auto& v : r["centroids"])
    if (!v.is_number())
      return error(errc::corrupt,
                   "routing.json: the router's centroids hold a value that is not "
                   "a number");
  auto c = r["centroids"].get<std::vector<float>>();
  if (k < 1 || c.size() != std::size_t(k) * std::size_t(dim))
    return error(errc::corrupt, "routing.json: the router's centroids are not k × dim");
  out.kmeans.emplace(k, dim, std::move(c));
  return out;
}

struct text_score {
  std::string file;
  int path = 0;
  std::size_t bytes = 0;     // the text's length
  double bits_per_byte = 0;  // over its bytes after the first
};

// Routes and scores each file with the run in rd (its base model, routing and store
// checkpoint). Errors name the file: unreadable, shorter than 2 bytes; those of read_routing,
// router_of, load_base and load_store.
template <nn::BlockModel Model>
result<std::vector<text_score>> score_texts(const dipaco_job<Model>& cfg, const run_dir& rd,
                                            const std::vector<std::string>& files) {
  const path::path_plan g = make_plan(cfg);
  nn::gemm_threads(cfg.train.threads);  // as print_results (job/results.hpp)
  const Model& model = cfg.model;
  auto routing = read_routing(rd);
  if (!routing) return routing.error();
  auto router = router_of(*routing, model.width());
  if (!router) return router.error();
  arena<host> base(model.layout());
  if (auto s = load_base(cfg, rd, model, base); !s) return s.error();
  store::module_store<store_outer> st(g.module_table(), outer_of(cfg));
  if (auto s = load_store(cfg, rd, g, st); !s) return s.error();
  const float* b = base.get(plane::param).data();
  const auto rule = route::sliding_window::make(model.shape().ctx).value_or_throw();
  auto ws = model.make_workspace({1, model.shape().ctx});
  io::byte_tokenizer tok;
  std::vector<text_score> out;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return error(errc::not_found, "--score: cannot read '" + f + "'");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto ids = tok.encode(text);
    if (ids.size() < 2) return error(errc::invalid_argument, "--score: '" + f + "' has < 2 bytes");
    const std::vector<std::span<const std::int32_t>> one{ids};
    const auto z = route::prefix_features(model, b, one, router->prefix, 1);
    const int p = router->route(z.data());
    std::vector<float> th(b, b + model.layout().total());
    g.assemble(p, th.data(), [&](int m, std::span<float> dst) { st.pull(m, dst); });
    const auto n = route::sequence_nll(model, th.data(), ids, 1, ids.size(), rule, ws);
    out.push_back({f, p, ids.size(), n.bits_per_token()});
  }
  return out;
}

// --score FILE …: prints each file's path and bits/byte, then a JSON line
// {"texts":[{"file","path","bits_per_byte","bytes"},…]}. Returns 0, or exit_bad_input.
template <nn::BlockModel Model>
int run_score(const dipaco_job<Model>& cfg, const run_dir& rd,
              const std::vector<std::string>& files) {
  auto got = score_texts(cfg, rd, files);
  if (!got)
    return std::fprintf(stderr, "%s: %s\n", cfg.program.c_str(), got.error().what().c_str()),
           exit_bad_input;
  const path::path_plan g = make_plan(cfg);
  json all = json::array();
  for (const auto& t : *got) {
    std::printf("%s: path %s, %.6f bits/byte over %zu bytes\n", t.file.c_str(),
                g.path_name(t.path).c_str(), t.bits_per_byte, t.bytes);
    all.push_back({{"file", t.file},
                   {"path", t.path},
                   {"bits_per_byte", t.bits_per_byte},
                   {"bytes", t.bytes}});
  }
  std::printf("%s\n", json{{"texts", all}}.dump().c_str());
  return 0;
}

}  // namespace paco::job
