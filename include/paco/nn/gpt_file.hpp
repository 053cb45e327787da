#pragma once
// gpt_file: a GPT's parameters as a self-describing safetensors file that a user can take
// elsewhere. Every tensor under its PyTorch / GPT-2 name (gpt::tensors(): wte.weight,
// h.0.attn.c_attn.weight, …, in PyTorch's shapes), and metadata
//   format  "paco-gpt-1"
//   config  the model configuration as JSON: {"vocab","ctx","d","layers","heads","mlp_mult",
//           "tie_weights"}
// plus what the caller adds (which path of which run, the round, the scorer). paco's checksum
// (io::checksum_key) covers tensors and metadata. examples/torch/score_exported.py loads such a
// file into PyTorch and reproduces paco's bits/byte.
//
// save_gpt_hf writes the same parameters in Hugging Face's GPT-2 layout instead: a directory
// with config.json (GPT2LMHeadModel: n_embd, n_layer, n_head, n_inner, n_positions, gelu_new,
// layer_norm_epsilon 1e-5, tie_word_embeddings) and model.safetensors whose tensors carry
// GPT2LMHeadModel's names ("transformer.h.0.attn.c_attn.weight", …) and shapes — GPT-2's Conv1D
// stores a projection as (in, out), the transpose of PyTorch's Linear — so that
// GPT2LMHeadModel.from_pretrained(dir) loads it.

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/safetensors.hpp"
#include "paco/nn/gpt.hpp"

namespace paco::nn {

inline constexpr const char* gpt_file_format = "paco-gpt-1";

// The configuration as the "config" metadata JSON (init_std is not part of a trained model).
inline std::string gpt_config_json(const gpt_config& c) {
  nlohmann::ordered_json j = {{"vocab", c.vocab},
                              {"ctx", c.ctx},
                              {"d", c.d},
                              {"layers", c.layers},
                              {"heads", c.heads},
                              {"mlp_mult", c.mlp_mult},
                              {"tie_weights", c.tie_weights}};
  return j.dump();
}

// Parses gpt_config_json's output. Errors: corrupt (not JSON, a field missing or of the wrong
// type), invalid_argument (a field out of range: gpt_config::validate's message).
inline result<gpt_config> gpt_config_from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return error(errc::corrupt, "gpt config is not a JSON object");
  gpt_config c;
  for (auto [key, field] : {std::pair{"vocab", &c.vocab}, std::pair{"ctx", &c.ctx},
                            std::pair{"d", &c.d}, std::pair{"layers", &c.layers},
                            std::pair{"heads", &c.heads}, std::pair{"mlp_mult", &c.mlp_mult}}) {
    if (!j.contains(key) || !j[key].is_number_integer())
      return error(errc::corrupt, std::string("gpt config lacks an integer \"") + key + "\"");
    *field = j[key].get<int>();
  }
  if (!j.contains("tie_weights") || !j["tie_weights"].is_boolean())
    return error(errc::corrupt, "gpt config lacks a boolean \"tie_weights\"");
  c.tie_weights = j["tie_weights"].get<bool>();
  if (auto s = c.validate(); !s) return s.error();
  return c;
}

// Writes θ (a full parameter plane of `model`) to path, atomically, with the metadata above and
// `extra`. Errors: save_safetensors'.
inline status save_gpt(const std::filesystem::path& path, const gpt& model, const float* theta,
                       std::map<std::string, std::string> extra = {}) {
  std::vector<io::tensor_ref> refs;
  for (auto& t : model.tensors()) refs.push_back({t.name, t.shape, theta + t.offset});
  extra["format"] = gpt_file_format;
  extra["config"] = gpt_config_json(model.config());
  return io::save_safetensors(path, refs, std::move(extra));
}

// Writes θ (a full parameter plane of `model`) in Hugging Face's GPT-2 layout to dir (created):
// dir/config.json and dir/model.safetensors (metadata "format": "pt", as transformers expects,
// plus `extra`). Errors: io (the directory or config.json), save_safetensors'.
inline status save_gpt_hf(const std::filesystem::path& dir, const gpt& model, const float* theta,
                          std::map<std::string, std::string> extra = {}) {
  const gpt_config& c = model.config();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return {errc::io, "cannot create '" + dir.string() + "': " + ec.message()};
  std::vector<io::tensor_ref> refs;
  std::vector<std::vector<float>> transposed;  // Conv1D weights, (in, out); moving keeps buffers
  for (auto& t : model.tensors()) {
    const bool conv1d = t.shape.size() == 2 &&
                        (t.name.ends_with("c_attn.weight") || t.name.ends_with("c_proj.weight") ||
                         t.name.ends_with("c_fc.weight"));
    const std::string name = t.name == "lm_head.weight" ? t.name : "transformer." + t.name;
    if (!conv1d) {
      refs.push_back({name, t.shape, theta + t.offset});
      continue;
    }
    const std::size_t out = t.shape[0], in = t.shape[1];
    auto& w = transposed.emplace_back(out * in);
    for (std::size_t o = 0; o < out; ++o)
      for (std::size_t i = 0; i < in; ++i) w[i * out + o] = theta[t.offset + o * in + i];
    refs.push_back({name, {in, out}, w.data()});
  }
  nlohmann::ordered_json cfg = {{"architectures", {"GPT2LMHeadModel"}},
                                {"model_type", "gpt2"},
                                {"vocab_size", c.vocab},
                                {"n_positions", c.ctx},
                                {"n_ctx", c.ctx},
                                {"n_embd", c.d},
                                {"n_layer", c.layers},
                                {"n_head", c.heads},
                                {"n_inner", c.mlp_mult * c.d},
                                {"activation_function", "gelu_new"},
                                {"layer_norm_epsilon", 1e-5},
                                {"resid_pdrop", 0.0},
                                {"embd_pdrop", 0.0},
                                {"attn_pdrop", 0.0},
                                {"tie_word_embeddings", c.tie_weights},
                                {"paco_config", nlohmann::json::parse(gpt_config_json(c))}};
  if (auto s = io::write_file_atomic(dir / "config.json", cfg.dump(2) + "\n"); !s) return s;
  extra["format"] = "pt";
  return io::save_safetensors(dir / "model.safetensors", refs, std::move(extra));
}

struct gpt_file {
  gpt_config config;
  std::vector<float> theta;  // a full parameter plane of gpt(config)
  std::map<std::string, std::string> metadata;
};

// Reads a file save_gpt wrote. Errors name the file: save_safetensors' (missing, truncated,
// checksum), corrupt (another format, no config), mismatch (a tensor missing or mis-shaped).
inline result<gpt_file> load_gpt(const std::filesystem::path& path) {
  const std::string what = "model file '" + path.string() + "'";
  auto f = io::load_safetensors(path);
  if (!f) return f.error();
  auto fmt = f->metadata.find("format");
  if (fmt == f->metadata.end() || fmt->second != gpt_file_format)
    return error(errc::corrupt, what + " is not a " + gpt_file_format + " file");
  auto cj = f->metadata.find("config");
  if (cj == f->metadata.end()) return error(errc::corrupt, what + " records no config");
  auto cfg = gpt_config_from_json(cj->second);
  if (!cfg) return error(cfg.error().code, what + ": " + cfg.error().message);
  gpt model(*cfg);
  gpt_file out{*cfg, std::vector<float>(model.layout().total(), 0.0f), f->metadata};
  for (auto& t : model.tensors()) {
    auto it = f->tensors.find(t.name);
    if (it == f->tensors.end() || it->second.shape != t.shape)
      return error(errc::mismatch, what + " lacks or mis-shapes " + t.name);
    std::copy(it->second.values.begin(), it->second.values.end(), out.theta.begin() + t.offset);
  }
  return out;
}

}  // namespace paco::nn
