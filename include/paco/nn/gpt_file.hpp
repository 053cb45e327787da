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
// GPT2LMHeadModel.from_pretrained(dir) loads it. A byte-level model (vocab 256, paco's byte
// tokenizer: id = byte value) also gets its tokenizer, so that text goes in and out of it with
// Hugging Face's tools alone:
//   tokenizer.json         the tokenizers library's format: a byte-level BPE with the 256 bytes as
//                          its vocabulary (GPT-2's byte ↔ character map) and no merges, so that
//                          encoding a text gives its UTF-8 bytes as ids, and decoding the reverse
//   tokenizer_config.json  PreTrainedTokenizerFast over it, model_max_length = ctx, and no special
//                          tokens (a bos/eos string there would be matched in raw text first and
//                          dropped on decoding: the tokenizer would no longer be the bytes)
//   README.md              a model card with its metadata header and how to load and score it
// and config.json's bos_token_id / eos_token_id are 0 (inside the vocabulary, where GPT-2's
// default 50256 is not): the model was trained on documents run together with no boundary
// token, and byte 0 (NUL) appears in no training text, so generation never stops on it early and
// a prompt should not begin with it.

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/json_read.hpp"
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

// Parses gpt_config_json's output. Errors: too_large (nested deeper than io::json_max_depth
// levels), corrupt (not JSON, a field missing or of the wrong type: 8.9 or "8" for an integer),
// invalid_argument (an integer beyond int, checked before narrowing; a field out of range:
// gpt_config::validate's message).
inline result<gpt_config> gpt_config_from_json(const std::string& text) {
  auto parsed = io::json_parse(text, "gpt config");
  if (!parsed && parsed.error().code == make_error_code(errc::too_large)) return parsed.error();
  if (!parsed || !parsed->is_object())
    return error(errc::corrupt, "gpt config is not a JSON object");
  const nlohmann::json& j = *parsed;
  gpt_config c;
  for (auto [key, field] : {std::pair{"vocab", &c.vocab}, std::pair{"ctx", &c.ctx},
                            std::pair{"d", &c.d}, std::pair{"layers", &c.layers},
                            std::pair{"heads", &c.heads}, std::pair{"mlp_mult", &c.mlp_mult}}) {
    if (!j.contains(key))
      return error(errc::corrupt, std::string("gpt config lacks an integer \"") + key + "\"");
    auto v = io::json_int<int>(j[key], std::string("gpt config \"") + key + "\"");
    if (!v) return v.error();
    *field = *v;
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

// paco's byte tokenizer's vocabulary: one id per byte value.
inline constexpr int byte_vocab = 256;

// GPT-2's map of the 256 byte values to printable characters (bytes_to_unicode), as UTF-8: the
// alphabet of a byte-level BPE.
inline std::vector<std::string> gpt2_byte_chars() {
  std::vector<int> cp(256, -1);
  auto keep = [&](int a, int b) {
    for (int v = a; v <= b; ++v) cp[std::size_t(v)] = v;
  };
  keep('!', '~'), keep(0xA1, 0xAC), keep(0xAE, 0xFF);
  for (int v = 0, n = 0; v < 256; ++v)
    if (cp[std::size_t(v)] < 0) cp[std::size_t(v)] = 256 + n++;
  std::vector<std::string> out;
  for (int c : cp) {  // every code point is below 0x800: one or two UTF-8 bytes
    std::string u;
    if (c < 0x80) {
      u += char(c);
    } else {
      u += char(0xC0 | (c >> 6));
      u += char(0x80 | (c & 0x3F));
    }
    out.push_back(u);
  }
  return out;
}

// dir/tokenizer.json and dir/tokenizer_config.json for paco's byte tokenizer (see the file
// comment). Errors: io naming the file.
inline status write_byte_tokenizer(const std::filesystem::path& dir, int ctx) {
  const auto chars = gpt2_byte_chars();
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < byte_vocab; ++b) vocab[chars[std::size_t(b)]] = b;
  const nlohmann::ordered_json byte_level = {{"type", "ByteLevel"},
                                             {"add_prefix_space", false},
                                             {"trim_offsets", false},
                                             {"use_regex", false}};
  const nlohmann::ordered_json tok = {{"version", "1.0"},
                                      {"truncation", nullptr},
                                      {"padding", nullptr},
                                      {"added_tokens", nlohmann::ordered_json::array()},
                                      {"normalizer", nullptr},
                                      {"pre_tokenizer", byte_level},
                                      {"post_processor", nullptr},
                                      {"decoder", byte_level},
                                      {"model",
                                       {{"type", "BPE"},
                                        {"dropout", nullptr},
                                        {"unk_token", nullptr},
                                        {"continuing_subword_prefix", nullptr},
                                        {"end_of_word_suffix", nullptr},
                                        {"fuse_unk", false},
                                        {"byte_fallback", false},
                                        {"vocab", vocab},
                                        {"merges", nlohmann::ordered_json::array()}}}};
  if (auto s = io::write_file_atomic(dir / "tokenizer.json", tok.dump(2) + "\n"); !s) return s;
  const nlohmann::ordered_json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                     {"model_max_length", ctx},
                                     {"clean_up_tokenization_spaces", false},
                                     {"paco_tokenizer",
                                      "bytes: a text's UTF-8 bytes are its ids (0-255); no special "
                                      "tokens were used in training"}};
  return io::write_file_atomic(dir / "tokenizer_config.json", tc.dump(2) + "\n");
}

// Writes θ (a full parameter plane of `model`) in Hugging Face's GPT-2 layout to dir (created):
// dir/config.json and dir/model.safetensors (metadata "format": "pt", as transformers expects,
// plus `extra`), and for a byte-level model its tokenizer (write_byte_tokenizer). Errors: io
// (the directory or a JSON file), save_safetensors'.
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
  if (c.vocab == byte_vocab) {
    cfg["bos_token_id"] = 0;
    cfg["eos_token_id"] = 0;
    if (auto s = write_byte_tokenizer(dir, c.ctx); !s) return s;
  }
  if (auto s = io::write_file_atomic(dir / "config.json", cfg.dump(2) + "\n"); !s) return s;
  extra["format"] = "pt";
  if (auto s = io::save_safetensors(dir / "model.safetensors", refs, std::move(extra)); !s)
    return s;
  // How to load it: transformers' GPT-2 classes, the bytes of a text as its token ids.
  std::ostringstream readme;
  readme << "---\nlibrary_name: transformers\npipeline_tag: text-generation\ntags:\n  - gpt2\n"
         << "  - paco\n---\n\n# " << dir.filename().string()
         << "\n\nA GPT-2-layout model written by paco (d " << c.d << ", " << c.layers << " layers, "
         << c.heads << " heads, context " << c.ctx << ", vocabulary " << c.vocab
         << ").\n\n```python\nimport torch\nfrom transformers import GPT2LMHeadModel\n\n"
         << "model = GPT2LMHeadModel.from_pretrained(\"" << dir.filename().string() << "\")\n";
  if (c.vocab == byte_vocab)
    readme << "ids = torch.tensor([list(\"Some text\".encode(\"utf-8\"))])  # byte-level: the "
              "UTF-8 bytes are the ids\n";
  else
    readme << "ids = torch.tensor([[0, 1, 2]])  # token ids of paco's tokenizer\n";
  readme << "nll = model(ids, labels=ids).loss  # nats per token\n```\n";
  return io::write_file_atomic(dir / "README.md", readme.str());
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
