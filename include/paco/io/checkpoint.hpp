#pragma once
// checkpoint: a model replica's arena (parameters and whatever optimizer state it holds) plus
// step and free-form metadata, as one safetensors file written atomically. Parameters keep their
// plain names (so PyTorch can load them); other planes are prefixed by the plane name, e.g.
// "moment1/h.0.attn.c_attn.weight".

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/io/safetensors.hpp"

namespace paco::io {

inline constexpr const char* checkpoint_format = "paco-checkpoint-1";

inline std::string plane_tensor_name(plane p, const std::string& name) {
  return p == plane::param ? name : std::string(plane_name(p)) + "/" + name;
}

// Saves every allocated plane except grad. metadata gains "format" and "step".
// Ensures: the file at path is either the previous checkpoint or this one, never partial.
inline status save_checkpoint(const std::filesystem::path& path,
                              const std::vector<named_tensor>& tensors, const arena<host>& a,
                              long step, std::map<std::string, std::string> metadata = {}) {
  std::vector<tensor_ref> refs;
  for (int pi = 0; pi < plane_count; ++pi) {
    const plane p = static_cast<plane>(pi);
    if (p == plane::grad || !a.has(p)) continue;
    const float* base = a.get(p).data();
    for (auto& t : tensors)
      refs.push_back({plane_tensor_name(p, t.name), t.shape, base + t.offset});
  }
  metadata["format"] = checkpoint_format;
  metadata["step"] = std::to_string(step);
  return save_safetensors(path, refs, metadata);
}

struct checkpoint_info {
  long step = 0;
  std::map<std::string, std::string> metadata;
};

// Loads a checkpoint into `a`. Every parameter tensor must be present with its shape; other
// planes are restored when the file has them. Errors name the file and the problem: missing,
// truncated or malformed (load_safetensors), no checksum or a checksum that disagrees with the
// content (corrupt), a missing or mismatched tensor.
inline result<checkpoint_info> load_checkpoint(const std::filesystem::path& path,
                                               const std::vector<named_tensor>& tensors,
                                               arena<host>& a) {
  auto f = load_safetensors(path);
  if (!f) return f.error();
  if (!f->metadata.count(checksum_key))
    return error(errc::corrupt, "checkpoint '" + path.string() +
                                    "' carries no checksum (not written by this paco, or edited)");
  auto fmt = f->metadata.find("format");
  if (fmt == f->metadata.end() || fmt->second != checkpoint_format)
    return error(errc::version, "'" + path.string() + "' is not a " + checkpoint_format + " file");
  for (int pi = 0; pi < plane_count; ++pi) {
    const plane p = static_cast<plane>(pi);
    if (p == plane::grad) continue;
    bool any = false;
    for (auto& t : tensors) any |= f->tensors.count(plane_tensor_name(p, t.name)) > 0;
    if (!any && p != plane::param) continue;
    auto dst = a.get(p);
    for (auto& t : tensors) {
      auto it = f->tensors.find(plane_tensor_name(p, t.name));
      if (it == f->tensors.end())
        return error(errc::mismatch, "checkpoint '" + path.string() + "' lacks tensor '" +
                                         plane_tensor_name(p, t.name) + "'");
      if (it->second.shape != t.shape)
        return error(errc::mismatch, "tensor '" + it->first + "' in '" + path.string() +
                                         "' has a different shape than the model's");
      std::copy(it->second.values.begin(), it->second.values.end(), dst.data() + t.offset);
    }
  }
  checkpoint_info info;
  info.metadata = f->metadata;
  try {
    info.step = std::stol(f->metadata.at("step"));
  } catch (...) {
    return error(errc::corrupt, "checkpoint '" + path.string() + "' has no valid step");
  }
  return info;
}

// Checks that the configuration a file recorded (metadata "config": space-separated key=value
// items) equals `expected`. Errors: mismatch naming the file and the first item that differs,
// corrupt if the file recorded none.
inline status check_config(const std::filesystem::path& path,
                           const std::map<std::string, std::string>& metadata,
                           const std::string& expected) {
  auto it = metadata.find("config");
  if (it == metadata.end())
    return {errc::corrupt, "'" + path.string() + "' records no configuration"};
  if (it->second == expected) return {};
  auto items = [](const std::string& s) {
    std::map<std::string, std::string> m;
    std::size_t i = 0;
    while (i < s.size()) {
      std::size_t e = s.find(' ', i);
      if (e == std::string::npos) e = s.size();
      const std::string kv = s.substr(i, e - i);
      const std::size_t q = kv.find('=');
      m[kv.substr(0, q)] = q == std::string::npos ? "" : kv.substr(q + 1);
      i = e + 1;
    }
    return m;
  };
  const auto got = items(it->second), want = items(expected);
  for (auto& [k, v] : want) {
    auto g = got.find(k);
    const std::string was = g == got.end() ? "(absent)" : g->second;
    if (was != v)
      return {errc::mismatch, "'" + path.string() + "' was written with " + k + " = " + was +
                                  ", this run has " + v};
  }
  return {errc::mismatch,
          "'" + path.string() + "' was written with another configuration (" + it->second + ")"};
}

}  // namespace paco::io
