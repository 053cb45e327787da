// The GPT against PyTorch on the same weights (passed through a safetensors file): logits, loss
// and every gradient agree to float32 tolerance; 200 AdamW steps on the same batches give loss
// curves within 1%. The PyTorch side is tests/parity/torch_side.py (Debian's python3-torch).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "paco/io/io.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"

using namespace paco;
namespace fs = std::filesystem;

namespace {
struct diff {
  double max_abs = 0, max_rel = 0, ref_max = 0;
};
// max |a−b|, and the max relative difference |a−b| / max(|b|, 1e-2·max|b|): entries far below
// the tensor's scale are compared at 1% of that scale, so float32 rounding of ~0 does not dominate.
diff compare(const float* a, const std::vector<float>& b) {
  diff d;
  for (float v : b) d.ref_max = std::max(d.ref_max, double(std::abs(v)));
  for (std::size_t i = 0; i < b.size(); ++i) {
    double e = std::abs(double(a[i]) - b[i]);
    d.max_abs = std::max(d.max_abs, e);
    d.max_rel =
        std::max(d.max_rel, e / std::max({double(std::abs(b[i])), 1e-2 * d.ref_max, 1e-30}));
  }
  return d;
}
}  // namespace

TEST_CASE("GPT matches PyTorch: logits, loss, gradients, and 200 AdamW steps", "[parity]") {
  const std::string src = PACO_SOURCE_DIR;
  for (bool tie : {false, true}) {
    DYNAMIC_SECTION("tie_weights=" << tie) {
      nn::gpt_config cfg{
          .vocab = 256, .ctx = 32, .d = 64, .layers = 2, .heads = 4, .tie_weights = tie};
      const int B = 4, T = 32, steps = 200;
      const float lr = 1e-3f;
      nn::gpt m(cfg);
      arena<host> a(m.layout());
      m.init(a, 11);
      auto dir = fs::temp_directory_path() /
                 ("paco_parity_" + std::to_string(::getpid()) + (tie ? "_tied" : ""));
      fs::create_directories(dir);
      // Weights and batches.
      std::vector<io::tensor_ref> w;
      for (auto& t : m.tensors())
        w.push_back({t.name, t.shape, a.get(plane::param).data() + t.offset});
      REQUIRE(io::save_safetensors(dir / "weights.safetensors", w).ok());
      rng r(5);
      std::vector<float> xf(B * T), yf(B * T), xs(steps * B * T), ys(steps * B * T);
      for (auto& v : xf) v = float(r.below(256));
      for (auto& v : yf) v = float(r.below(256));
      // The curve's batches come from one short "text" so the loss falls.
      std::string text = "the quick brown fox jumps over the lazy dog. ";
      for (int s = 0; s < steps * B; ++s) {
        std::size_t o = r.below(text.size());
        for (int t = 0; t < T; ++t) {
          xs[std::size_t(s) * T + t] = float((unsigned char)text[(o + t) % text.size()]);
          ys[std::size_t(s) * T + t] = float((unsigned char)text[(o + t + 1) % text.size()]);
        }
      }
      REQUIRE(io::save_safetensors(
                  dir / "batch.safetensors",
                  {{"x", {std::size_t(B), std::size_t(T)}, xf.data()},
                   {"y", {std::size_t(B), std::size_t(T)}, yf.data()},
                   {"xs", {std::size_t(steps), std::size_t(B), std::size_t(T)}, xs.data()},
                   {"ys", {std::size_t(steps), std::size_t(B), std::size_t(T)}, ys.data()}})
                  .ok());
      std::ofstream(dir / "config.json")
          << "{\"vocab\":256,\"ctx\":32,\"d\":64,\"layers\":2,\"heads\":4,\"mlp_mult\":4,\"tie\":"
          << (tie ? "true" : "false") << ",\"lr\":" << lr << "}";
      const std::string cmd = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 " + src +
                              "/tests/parity/torch_side.py " + dir.string();
      REQUIRE(std::system(cmd.c_str()) == 0);
      auto ref = io::load_safetensors(dir / "torch.safetensors");
      REQUIRE(ref.ok());

      // One forward/backward.
      std::vector<std::int32_t> x(B * T), y(B * T);
      for (int i = 0; i < B * T; ++i) x[i] = std::int32_t(xf[i]), y[i] = std::int32_t(yf[i]);
      auto ws = m.make_workspace({B, T});
      a.zero(plane::grad);
      double loss = m.forward_backward(a.get(plane::param).data(), a.get(plane::grad).data(),
                                       x.data(), y.data(), ws);
      const float torch_loss = ref->tensors.at("loss").values[0];
      std::printf("[parity tie=%d] loss paco %.7f torch %.7f |diff| %.2e\n", tie, loss, torch_loss,
                  std::abs(loss - torch_loss));
      REQUIRE(std::abs(loss - torch_loss) < 1e-4 * std::abs(torch_loss));
      // forward_backward overwrote logits with dlogits: recompute the logits.
      m.forward(a.get(plane::param).data(), x.data(), ws);
      auto dl = compare(ws.logits.data(), ref->tensors.at("logits").values);
      std::printf("[parity tie=%d] logits max abs %.2e max rel %.2e\n", tie, dl.max_abs,
                  dl.max_rel);
      REQUIRE(dl.max_rel < 1e-4);
      double worst = 0;
      for (auto& t : m.tensors()) {
        auto it = ref->tensors.find("grad." + t.name);
        REQUIRE(it != ref->tensors.end());
        auto dg = compare(a.get(plane::grad).data() + t.offset, it->second.values);
        std::printf("[parity tie=%d] grad %-24s max abs %.2e max rel %.2e\n", tie, t.name.c_str(),
                    dg.max_abs, dg.max_rel);
        worst = std::max(worst, dg.max_rel);
      }
      REQUIRE(worst < 1e-4);

      // 200 AdamW steps.
      nn::replica<nn::gpt> rep(m, B, T, 1);
      optim::adamw opt{.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
      m.init(a, 11);
      a.zero(plane::moment1);
      a.zero(plane::moment2);
      const auto& curve = ref->tensors.at("curve").values;
      double worst_curve = 0, first = 0, last = 0;
      for (int s = 0; s < steps; ++s) {
        std::vector<std::int32_t> bx(B * T), by(B * T);
        for (int i = 0; i < B * T; ++i)
          bx[i] = std::int32_t(xs[std::size_t(s) * B * T + i]),
          by[i] = std::int32_t(ys[std::size_t(s) * B * T + i]);
        double l = rep.forward_backward(a, bx.data(), by.data());
        opt.step(a, s + 1, opt.lr);
        worst_curve = std::max(worst_curve, std::abs(l - curve[s]) / curve[s]);
        if (s == 0) first = l;
        last = l;
      }
      std::printf(
          "[parity tie=%d] 200 AdamW steps: loss %.4f -> %.4f (torch %.4f -> %.4f), max "
          "relative curve diff %.2e\n",
          tie, first, last, curve[0], curve[steps - 1], worst_curve);
      REQUIRE(curve[steps - 1] < 0.5 * curve[0]);  // the curve really descends
      REQUIRE(worst_curve < 0.01);
      fs::remove_all(dir);
    }
  }
}
