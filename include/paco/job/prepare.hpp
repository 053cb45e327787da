#pragma once
// A run's start (the launcher's, or --role prepare): the shared base model, pretrained for
// dipaco.pretrain_steps on every training document (DiPaCo's shared initialisation; also the
// router's feature extractor), and the routing of every document: k-means over the base model's
// prefix features, one cluster per path. Writes base.safetensors and routing.json (a new run id).
#include <cstdio>
#include <filesystem>
#include <span>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/io/progress.hpp"
#include "paco/io/safetensors.hpp"
#include "paco/job/data.hpp"
#include "paco/job/run_files.hpp"
#include "paco/nn/gemm.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/route/route.hpp"
#include "paco/train/inner_loop.hpp"

namespace paco::job {

// Requires: data loaded for cfg (load_job_data). Ensures: rd holds base.safetensors and
// routing.json. Errors: io naming the file; k-means' own.
template <nn::BlockModel Model>
status prepare(const dipaco_job<Model>& cfg, const run_dir& rd, const job_data& data,
               const path::path_plan& g) {
  fs::create_directories(rd.dir);
  const Model& model = cfg.model;
  arena<host> a(model.layout());
  model.init(a, std::uint64_t(cfg.train.seed));
  const auto& tc = cfg.train;
  const int B = tc.batch, T = cfg.model.shape().ctx;
  if (cfg.dipaco.pretrain_steps > 0) {
    auto all = stream_of(data, {}, -1);
    train::inner_loop<Model, optim::adamw> loop(model,
                                                {.batch = B,
                                                 .ctx = T,
                                                 .grad_clip = tc.grad_clip,
                                                 .schedule = {.lr = tc.lr,
                                                              .min_lr = tc.lr,
                                                              .warmup = tc.warmup,
                                                              .total = cfg.dipaco.pretrain_steps},
                                                 .threads = tc.threads},
                                                all, std::uint64_t(tc.seed) * 31 + 7);
    const optim::adamw opt{
        .lr = tc.lr, .beta1 = tc.beta1, .beta2 = tc.beta2, .weight_decay = tc.weight_decay};
    a.zero(plane::moment1);
    a.zero(plane::moment2);
    io::progress bar("base model", cfg.dipaco.pretrain_steps);
    loop.run(a, opt, cfg.dipaco.pretrain_steps, [&](long t, double l) {
      char txt[48];
      std::snprintf(txt, sizeof txt, "loss %.3f", l);
      bar.update(t, txt);
    });
  }
  // Router: k-means over the base model's prefix features, one cluster per path.
  const float* theta = a.get(plane::param).data();
  std::vector<std::span<const std::int32_t>> tr, va;
  for (auto& d : data.train) tr.push_back(d);
  for (auto& d : data.val) va.push_back(d);
  const int D = cfg.model.width(), P = cfg.dipaco.prefix;
  nn::gemm_threads(cfg.train.threads);  // as print_results (job/results.hpp)
  auto ft = route::prefix_features(model, theta, tr, P),
       fv = route::prefix_features(model, theta, va, P);
  std::vector<int> train_route(data.train.size(), 0), val_route(data.val.size(), 0);
  // The router itself, kept with the routes so that new text can be routed later (router_of,
  // --score, --export): k centroids of D floats; one path needs none.
  json router = {{"kind", "single"}, {"prefix", P}};
  if (g.paths() > 1) {
    auto km = route::kmeans_router::fit(ft, int(tr.size()), D,
                                        {.k = g.paths(), .seed = std::uint64_t(tc.seed)});
    if (!km) return km.error();
    for (std::size_t i = 0; i < tr.size(); ++i) train_route[i] = km->route(&ft[i * D]);
    for (std::size_t i = 0; i < va.size(); ++i) val_route[i] = km->route(&fv[i * D]);
    router = {{"kind", "kmeans"},
              {"prefix", P},
              {"k", g.paths()},
              {"dim", D},
              {"centroids", km->centroids()}};
  }
  std::vector<io::tensor_ref> t;
  for (auto& nt : model.tensors()) t.push_back({nt.name, nt.shape, theta + nt.offset});
  if (auto s = io::save_safetensors(
          rd.base(), t, {{"format", "paco-base-1"}, {"config", config_fingerprint(cfg)}});
      !s)
    return s;
  json r = {{"paths", g.paths()},
            {"train_route", train_route},
            {"val_route", val_route},
            {"router", router},
            {"run_id", random_token()}};
  return write_routing(rd, r);
}

}  // namespace paco::job
