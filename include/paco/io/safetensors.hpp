#pragma once
// safetensors: the Hugging Face tensor file format (8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the raw data).
// paco writes F32 tensors atomically and reads F32/F64 with full validation: every malformed
// file is an error naming the problem, never an out-of-bounds read. Every file paco writes
// carries a checksum of its tensors and metadata (metadata key "paco.checksum"); a file that
// has one is verified when read, so a corrupt tensor or an edited metadata value is an error
// (files from other tools have none and are read as they are).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"
#include "paco/core/hash.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/io/json_read.hpp"

namespace paco::io {

// A tensor to write: name, shape, and n = Π shape floats at data.
struct tensor_ref {
  std::string name;
  std::vector<std::size_t> shape;
  const float* data = nullptr;
};

// A tensor read back (always converted to float32).
struct tensor_data {
  std::vector<std::size_t> shape;
  std::vector<float> values;
};

struct safetensors_file {
  std::map<std::string, tensor_data> tensors;
  std::map<std::string, std::string> metadata;
};

inline constexpr std::uint64_t safetensors_max_header = 100u << 20;  // 100 MiB
inline constexpr const char* checksum_key = "paco.checksum";
// Every file also names how its checksum is computed (detail::content_checksum), so that a reader
// without paco can verify it.
inline constexpr const char* checksum_algorithm_key = "paco.checksum_algorithm";
inline constexpr const char* checksum_algorithm =
    "paco-hash64-chain-1: h = 0x70616365; for each tensor in name order: h = hash64(name, h), "
    "h = hash64(each dim as uint64 LE, h), h = hash64(float32 LE data, h); for each other "
    "metadata entry in key order: h = hash64(value, hash64(key, h)); 16 lowercase hex digits of "
    "h; hash64 is paco/core/hash.hpp's";

namespace detail {
// hash64 chained over every tensor in name order (name, shape, float32 bytes), then every
// metadata entry but the checksum in key order; 16 hex digits.
template <class Tensors>
std::string content_checksum(const Tensors& by_name,
                             const std::map<std::string, std::string>& metadata) {
  std::uint64_t h = 0x70616365u;
  for (auto& [name, t] : by_name) {
    const auto& [shape, data, n] = t;
    h = hash64(name.data(), name.size(), h);
    for (std::uint64_t d : *shape) h = hash64(&d, sizeof d, h);
    h = hash64(data, n * sizeof(float), h);
  }
  for (auto& [k, v] : metadata)
    if (k != checksum_key) h = hash64(v.data(), v.size(), hash64(k.data(), k.size(), h));
  char hex[17];
  for (int i = 0; i < 16; ++i) hex[i] = "0123456789abcdef"[(h >> (60 - 4 * i)) & 15];
  hex[16] = 0;
  return hex;
}
using checksum_entry = std::tuple<const std::vector<std::size_t>*, const float*, std::size_t>;
}  // namespace detail

// Writes tensors + metadata to path atomically. Requires: distinct names, non-null data.
// Ensures: the metadata gains checksum_algorithm_key and checksum_key, the checksum of the
// tensors and the metadata (checksum_algorithm_key's entry included).
inline status save_safetensors(const std::filesystem::path& path,
                               const std::vector<tensor_ref>& tensors,
                               std::map<std::string, std::string> metadata = {}) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  {
    std::map<std::string, detail::checksum_entry> by_name;
    for (auto& t : tensors) {
      std::size_t n = 1;
      for (auto d : t.shape) n *= d;
      by_name[t.name] = {&t.shape, t.data, n};
    }
    metadata[checksum_algorithm_key] = checksum_algorithm;
    metadata[checksum_key] = detail::content_checksum(by_name, metadata);
  }
  h["__metadata__"] = metadata;
  std::uint64_t off = 0;
  for (auto& t : tensors) {
    if (h.contains(t.name)) return {errc::invalid_argument, "duplicate tensor name " + t.name};
    std::size_t n = 1;
    for (auto s : t.shape) n *= s;
    h[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + 4 * n}}};
    off += 4 * n;
  }
  std::string header = h.dump();
  while (header.size() % 8) header += ' ';  // data starts 8-byte aligned
  const std::uint64_t hl = header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(hl >> (8 * i));
  return write_file_atomic(path, [&](const auto& append) {
    if (!append(len, 8) || !append(header.data(), header.size())) return false;
    for (auto& t : tensors) {
      std::size_t n = 1;
      for (auto s : t.shape) n *= s;
      if (n && !append(t.data, 4 * n)) return false;
    }
    return true;
  });
}

// Reads and validates a safetensors file.
// Errors: io (unreadable), corrupt (bad length, JSON, dtype, shape/offset mismatch, overlap; a
// dimension or offset that is not an integer ≥ 0, checked before narrowing), too_large (a header
// nested deeper than json_max_depth levels).
inline result<safetensors_file> load_safetensors(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error(errc::not_found, "cannot open safetensors file '" + path.string() + "'");
  in.seekg(0, std::ios::end);
  const std::uint64_t size = std::uint64_t(in.tellg());
  in.seekg(0);
  auto bad = [&](const std::string& why) {
    std::string m = "'";  // appended piecewise: g++ 12 warns falsely on "'" + std::string&&
    m += path.string();
    m += "' is not a valid safetensors file: ";
    m += why;
    return error(errc::corrupt, std::move(m));
  };
  if (size < 8) return bad("shorter than its 8-byte header length");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  std::uint64_t hl = 0;
  for (int i = 0; i < 8; ++i) hl |= std::uint64_t(len[i]) << (8 * i);
  if (hl > safetensors_max_header || hl > size - 8)
    return bad("header length " + std::to_string(hl) + " exceeds the file or the 100 MiB bound");
  std::string header(hl, '\0');
  in.read(header.data(), std::streamsize(hl));
  auto parsed = json_parse(header, "header");  // nesting bounded: io::json_max_depth
  if (!parsed && parsed.error().code == make_error_code(errc::too_large))
    return error(errc::too_large, bad(parsed.error().message).message);
  if (!parsed || !parsed->is_object()) return bad("header is not a JSON object");
  nlohmann::json& h = *parsed;
  const std::uint64_t data_size = size - 8 - hl;
  safetensors_file f;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) return bad("__metadata__ is not an object");
      for (auto& [k, v] : e.items()) {
        if (!v.is_string()) return bad("metadata value of '" + k + "' is not a string");
        f.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets"))
      return bad("tensor '" + name + "' lacks dtype, shape or data_offsets");
    const auto& dt = e["dtype"];
    if (!dt.is_string()) return bad("tensor '" + name + "' has a non-string dtype");
    const std::string dtype = dt.get<std::string>();
    std::size_t esize = dtype == "F32" ? 4 : dtype == "F64" ? 8 : 0;
    if (!esize) return bad("tensor '" + name + "' has unsupported dtype " + dtype);
    tensor_data t;
    std::uint64_t n = 1;
    if (!e["shape"].is_array()) return bad("tensor '" + name + "' shape is not an array");
    for (auto& s : e["shape"]) {
      const auto d = json_int<std::size_t>(s, "dimension");  // an integer ≥ 0, not narrowed
      if (!d) return bad("tensor '" + name + "' has a bad dimension (" + d.error().message + ")");
      // n·d > data_size, without forming n·d (which could wrap to a small number).
      if (*d != 0 && n > data_size / *d)
        return bad("tensor '" + name + "' is larger than the file");
      t.shape.push_back(*d);
      n *= *d;
    }
    const auto& o = e["data_offsets"];
    if (!o.is_array() || o.size() != 2)
      return bad("tensor '" + name + "' has malformed data_offsets");
    const auto ob = json_int<std::uint64_t>(o[0], "data_offsets[0]"),
               oe = json_int<std::uint64_t>(o[1], "data_offsets[1]");
    if (!ob || !oe) return bad("tensor '" + name + "' has malformed data_offsets");
    const std::uint64_t b = *ob, en = *oe;
    if (b > en || en > data_size || en - b != n * esize)
      return bad("tensor '" + name + "' data_offsets [" + std::to_string(b) + ", " +
                 std::to_string(en) + ") disagree with its shape or the file size");
    ranges.push_back({b, en});
    t.values.resize(n);
    in.seekg(std::streamoff(8 + hl + b));
    if (esize == 4) {
      in.read(reinterpret_cast<char*>(t.values.data()), std::streamsize(n * 4));
    } else {
      std::vector<double> tmp(n);
      in.read(reinterpret_cast<char*>(tmp.data()), std::streamsize(n * 8));
      for (std::size_t i = 0; i < n; ++i) t.values[i] = float(tmp[i]);
    }
    if (!in) return error(errc::io, "reading tensor '" + name + "' from '" + path.string() + "'");
    f.tensors.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return bad("tensor data ranges overlap");
  if (auto c = f.metadata.find(checksum_key); c != f.metadata.end()) {
    std::map<std::string, detail::checksum_entry> by_name;
    for (auto& [name, t] : f.tensors) by_name[name] = {&t.shape, t.values.data(), t.values.size()};
    const std::string got = detail::content_checksum(by_name, f.metadata);
    if (got != c->second)
      return bad("checksum " + got + " of its tensors and metadata differs from the recorded " +
                 c->second + " (the file was corrupted or edited)");
  }
  return f;
}

}  // namespace paco::io
