#pragma once
// topology_file: reads a topology (and optionally its workload) from a small TOML or JSON file.
// TOML is converted to JSON by toml++ and both go through one reader, so the two formats accept
// exactly the same schema. Two ways to describe the network (see
// examples/configs/topology_example.toml and docs/placement.md):
//
//   sites form                              matrix form
//   [[site]]                                latency_ms     = [[0, 5], [5, 0]]    # (N,N) ms
//   name = "Oregon"                         bandwidth_gbps = [[0, 2], [2, 0]]    # (N,N) Gbit/s
//   devices = 8                             [[device]]                 # optional, N entries
//   latency_ms = 5        # inside          name = "a"; site = "x"; compute_tflops = 125
//   bandwidth_gbps = 2    # inside
//   [[link]]   # every pair of sites, symmetric
//   a = "Oregon"; b = "Tokyo"; latency_ms = 96; bandwidth_gbps = 0.523
//
//   [workload]   # optional in both forms; defaults of paco::place::workload (GPT-3 XL)
//   d_pp = 8; d_dp = 8; c_dp_gb = 0.65; c_pp_gb = 0.4712
//
// Every error names the file, the field and the accepted range; nothing throws out of here.
// Integers are checked for type and range before narrowing, and a document nested deeper than
// io::json_max_depth levels is refused (io/json_read.hpp).

#include <toml++/toml.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/io/json_read.hpp"
#include "paco/place/topology.hpp"

namespace paco::place {

// What a topology file holds.
struct topology_document {
  topology net;                  // validated
  std::optional<workload> load;  // present iff the file has a [workload] table
};

namespace detail {

using json = nlohmann::json;

inline error file_error(std::string_view origin, std::string what) {
  return error{errc::invalid_argument, std::string(origin) + ": " + std::move(what)};
}

// A finite number at `j[key]` (required unless `fallback` is given).
inline result<double> number_field(const json& j, const char* key, std::string_view where,
                                   std::string_view origin,
                                   std::optional<double> fallback = std::nullopt) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (fallback) return *fallback;
    return file_error(origin, std::string(where) + ": missing field '" + key + "'");
  }
  if (!it->is_number())
    return file_error(
        origin, std::string(where) + "." + key + ": expected a number, got " + it->type_name());
  double v = it->get<double>();
  if (!std::isfinite(v))
    return file_error(origin, std::string(where) + "." + key + ": must be finite");
  return v;
}

inline status check_keys(const json& j, std::string_view where, std::string_view origin,
                         std::initializer_list<std::string_view> accepted) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (auto a : accepted) ok = ok || it.key() == a;
    if (!ok) {
      std::string list;
      for (auto a : accepted) list += (list.empty() ? "" : ", ") + std::string(a);
      return file_error(
          origin, std::string(where) + ": unknown key '" + it.key() + "' (accepted: " + list + ")");
    }
  }
  return {};
}

// An (N,N) matrix of numbers at j[key]; N is the row count, every row must have N entries.
inline result<std::vector<double>> matrix_field(const json& j, const char* key,
                                                std::string_view origin, std::size_t& n) {
  auto it = j.find(key);
  if (it == j.end()) return file_error(origin, std::string("missing field '") + key + "'");
  if (!it->is_array() || it->empty())
    return file_error(origin, std::string(key) + ": expected a non-empty array of rows");
  n = it->size();
  std::vector<double> m;
  m.reserve(n * n);
  for (std::size_t i = 0; i < n; ++i) {
    const json& row = (*it)[i];
    if (!row.is_array())
      return file_error(origin, std::string(key) + "[" + std::to_string(i) +
                                    "]: expected an array (a matrix row)");
    if (row.size() != n)
      return file_error(origin, std::string(key) + ": matrix is not square: row " +
                                    std::to_string(i) + " has " + std::to_string(row.size()) +
                                    " entries, expected " + std::to_string(n));
    for (std::size_t k = 0; k < n; ++k) {
      if (!row[k].is_number())
        return file_error(origin, std::string(key) + "[" + std::to_string(i) + "][" +
                                      std::to_string(k) + "]: expected a number, got " +
                                      row[k].type_name());
      m.push_back(row[k].get<double>());
    }
  }
  return m;
}

inline result<workload> read_workload(const json& j, std::string_view origin) {
  if (!j.is_object()) return file_error(origin, "workload: expected a table");
  if (auto s = check_keys(j, "workload", origin, {"d_pp", "d_dp", "c_dp_gb", "c_pp_gb"}); !s)
    return s.error();
  workload w;
  for (auto [key, field] : {std::pair{"d_pp", &w.d_pp}, std::pair{"d_dp", &w.d_dp}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    // Checked before narrowing; validate(w, N) then checks the range, with its own message.
    auto v = io::json_int<int>(*it, std::string("workload.") + key);
    if (!v) return file_error(origin, v.error().message);
    *field = *v;
  }
  auto cdp = number_field(j, "c_dp_gb", "workload", origin, w.c_dp_gb);
  if (!cdp) return cdp.error();
  auto cpp = number_field(j, "c_pp_gb", "workload", origin, w.c_pp_gb);
  if (!cpp) return cpp.error();
  w.c_dp_gb = *cdp;
  w.c_pp_gb = *cpp;
  return w;
}

inline result<topology> read_sites(const json& j, std::string_view origin) {
  const json& sites = j["site"];
  if (!sites.is_array() || sites.empty())
    return file_error(origin, "site: expected a non-empty array of [[site]] tables");
  std::vector<std::string> names;
  std::vector<int> counts;
  std::vector<double> in_lat, in_bw, tflops, mem;
  for (std::size_t s = 0; s < sites.size(); ++s) {
    const json& e = sites[s];
    std::string where = "site[" + std::to_string(s) + "]";
    if (!e.is_object()) return file_error(origin, where + ": expected a table");
    if (auto st = check_keys(
            e, where, origin,
            {"name", "devices", "latency_ms", "bandwidth_gbps", "compute_tflops", "memory_gb"});
        !st)
      return st.error();
    if (!e.contains("name") || !e["name"].is_string())
      return file_error(origin, where + ".name: expected a string");
    std::string name = e["name"].get<std::string>();
    for (const auto& prev : names)
      if (prev == name) return file_error(origin, where + ".name: duplicate site '" + name + "'");
    where = "site '" + name + "'";
    if (!e.contains("devices"))
      return file_error(origin, where + ".devices: expected an integer in [1, 4096]");
    auto devices = io::json_int(e["devices"], where + ".devices", 1, 4096);
    if (!devices) return file_error(origin, devices.error().message);
    auto lat = number_field(e, "latency_ms", where, origin);
    if (!lat) return lat.error();
    auto bw = number_field(e, "bandwidth_gbps", where, origin);
    if (!bw) return bw.error();
    auto tf = number_field(e, "compute_tflops", where, origin, 0.0);
    if (!tf) return tf.error();
    auto mg = number_field(e, "memory_gb", where, origin, 0.0);
    if (!mg) return mg.error();
    if (*lat < 0) return file_error(origin, where + ".latency_ms: must be >= 0");
    if (*bw <= 0) return file_error(origin, where + ".bandwidth_gbps: must be > 0");
    names.push_back(name);
    counts.push_back(*devices);
    in_lat.push_back(*lat);
    in_bw.push_back(*bw);
    tflops.push_back(*tf);
    mem.push_back(*mg);
  }
  const std::size_t S = names.size();
  std::vector<double> x_lat(S * S, -1), x_bw(S * S, -1);
  if (j.contains("link") && !j["link"].is_array())
    return file_error(origin, "link: expected an array of [[link]] tables");
  const json links = j.contains("link") ? j["link"] : json::array();
  for (std::size_t k = 0; k < links.size(); ++k) {
    const json& e = links[k];
    std::string where = "link[" + std::to_string(k) + "]";
    if (!e.is_object()) return file_error(origin, where + ": expected a table");
    if (auto st = check_keys(e, where, origin, {"a", "b", "latency_ms", "bandwidth_gbps"}); !st)
      return st.error();
    std::size_t ends[2];
    const char* keys[2] = {"a", "b"};
    for (int t = 0; t < 2; ++t) {
      if (!e.contains(keys[t]) || !e[keys[t]].is_string())
        return file_error(origin, where + "." + keys[t] + ": expected a site name");
      std::string nm = e[keys[t]].get<std::string>();
      std::size_t idx = 0;
      while (idx < S && names[idx] != nm) ++idx;
      if (idx == S)
        return file_error(origin, where + "." + keys[t] + ": unknown site '" + nm + "'");
      ends[t] = idx;
    }
    if (ends[0] == ends[1]) return file_error(origin, where + ": a link joins two different sites");
    auto lat = number_field(e, "latency_ms", where, origin);
    if (!lat) return lat.error();
    auto bw = number_field(e, "bandwidth_gbps", where, origin);
    if (!bw) return bw.error();
    if (*lat < 0) return file_error(origin, where + ".latency_ms: must be >= 0");
    if (*bw <= 0) return file_error(origin, where + ".bandwidth_gbps: must be > 0");
    if (x_lat[ends[0] * S + ends[1]] >= 0)
      return file_error(origin, where + ": duplicate link between '" + names[ends[0]] + "' and '" +
                                    names[ends[1]] + "'");
    x_lat[ends[0] * S + ends[1]] = x_lat[ends[1] * S + ends[0]] = *lat;
    x_bw[ends[0] * S + ends[1]] = x_bw[ends[1] * S + ends[0]] = *bw;
  }
  for (std::size_t a = 0; a < S; ++a)
    for (std::size_t b = a + 1; b < S; ++b)
      if (x_lat[a * S + b] < 0)
        return file_error(origin, "link: missing [[link]] between sites '" + names[a] + "' and '" +
                                      names[b] + "' (every pair needs one)");
  topology t = topology_from_sites(names, counts, in_lat, in_bw, x_lat, x_bw);
  std::size_t i = 0;
  for (std::size_t s = 0; s < S; ++s)
    for (int k = 0; k < counts[s]; ++k, ++i) {
      t.devices[i].compute_tflops = tflops[s];
      t.devices[i].memory_gb = mem[s];
    }
  return t;
}

inline result<topology> read_matrices(const json& j, std::string_view origin) {
  std::size_t n_lat = 0, n_bw = 0;
  auto lat = matrix_field(j, "latency_ms", origin, n_lat);
  if (!lat) return lat.error();
  auto bw = matrix_field(j, "bandwidth_gbps", origin, n_bw);
  if (!bw) return bw.error();
  if (n_lat != n_bw)
    return file_error(origin, "latency_ms is " + std::to_string(n_lat) + "x" +
                                  std::to_string(n_lat) + " but bandwidth_gbps is " +
                                  std::to_string(n_bw) + "x" + std::to_string(n_bw));
  topology t;
  t.latency_ms = std::move(*lat);
  t.bandwidth_gbps = std::move(*bw);
  t.devices.resize(n_lat);
  for (std::size_t i = 0; i < n_lat; ++i) t.devices[i].name = "d" + std::to_string(i);
  if (j.contains("device")) {
    const json& ds = j["device"];
    if (!ds.is_array() || ds.size() != n_lat)
      return file_error(origin, "device: expected an array of " + std::to_string(n_lat) +
                                    " [[device]] tables (one per matrix row)");
    for (std::size_t i = 0; i < n_lat; ++i) {
      const json& e = ds[i];
      std::string where = "device[" + std::to_string(i) + "]";
      if (!e.is_object()) return file_error(origin, where + ": expected a table");
      if (auto st = check_keys(e, where, origin, {"name", "site", "compute_tflops", "memory_gb"});
          !st)
        return st.error();
      for (auto [key, field] :
           {std::pair{"name", &t.devices[i].name}, std::pair{"site", &t.devices[i].site}}) {
        if (!e.contains(key)) continue;
        if (!e[key].is_string())
          return file_error(origin, where + "." + key + ": expected a string");
        *field = e[key].get<std::string>();
      }
      auto tf = number_field(e, "compute_tflops", where, origin, 0.0);
      if (!tf) return tf.error();
      auto mg = number_field(e, "memory_gb", where, origin, 0.0);
      if (!mg) return mg.error();
      t.devices[i].compute_tflops = *tf;
      t.devices[i].memory_gb = *mg;
    }
  }
  return t;
}

}  // namespace detail

// Reads a topology document from parsed JSON (the schema at the top of this file).
// Requires: nothing. Ensures: ok() iff the document follows the schema and the topology passes
// validate() (and, when present, the workload passes validate(w, N)); otherwise
// invalid_argument naming `origin`, the field and the accepted range. Cost: O(N^2).
inline result<topology_document> read_topology(const nlohmann::json& j, std::string_view origin) {
  using detail::file_error;
  if (!j.is_object()) return file_error(origin, "expected a table/object at the top level");
  if (auto s = detail::check_keys(j, "top level", origin,
                                  {"site", "link", "latency_ms", "bandwidth_gbps", "device",
                                   "workload", "name", "description"});
      !s)
    return s.error();
  const bool sites = j.contains("site");
  const bool matrices = j.contains("latency_ms") || j.contains("bandwidth_gbps");
  if (sites == matrices)
    return file_error(origin, sites ? "give either [[site]]/[[link]] tables or latency_ms/"
                                      "bandwidth_gbps matrices, not both"
                                    : "no network: give [[site]] tables or latency_ms and "
                                      "bandwidth_gbps matrices");
  if (sites && j.contains("device"))
    return file_error(origin, "[[device]] tables belong to the matrix form, not the site form");
  auto t = sites ? detail::read_sites(j, origin) : detail::read_matrices(j, origin);
  if (!t) return t.error();
  if (auto s = validate(*t); !s) return file_error(origin, s.error().message);
  topology_document doc{std::move(*t), std::nullopt};
  if (j.contains("workload")) {
    auto w = detail::read_workload(j["workload"], origin);
    if (!w) return w.error();
    if (auto s = validate(*w, doc.net.size()); !s) return file_error(origin, s.error().message);
    doc.load = *w;
  }
  return doc;
}

// Parses JSON text. Ensures: corrupt (with the parser's position) on a syntax error, too_large
// when nested deeper than io::json_max_depth levels (io::json_parse's), else as read_topology.
// Cost: O(size + N^2).
inline result<topology_document> parse_topology_json(std::string_view text,
                                                     std::string_view origin = "<json>") {
  auto j = io::json_parse(text, origin);
  if (!j) return j.error();
  return read_topology(*j, origin);
}

// Parses TOML text. Ensures: corrupt naming line and column on a syntax error, else as
// read_topology. Cost: O(size + N^2).
inline result<topology_document> parse_topology_toml(std::string_view text,
                                                     std::string_view origin = "<toml>") {
  std::ostringstream as_json;
  try {
    toml::table tbl = toml::parse(text, origin);
    as_json << toml::json_formatter{tbl};
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return error{errc::corrupt, std::string(origin) + ":" + std::to_string(where.line) + ":" +
                                    std::to_string(where.column) + ": " +
                                    std::string(e.description())};
  }
  auto j = io::json_parse(as_json.view(), origin);
  if (!j && j.error().code == make_error_code(errc::too_large))
    return error{errc::too_large, std::string(origin) + ": nested deeper than " +
                                      std::to_string(io::json_max_depth) +
                                      " levels of arrays and tables"};
  if (!j) return error{errc::corrupt, std::string(origin) + ": unreadable TOML"};
  return read_topology(*j, origin);
}

// Reads a .toml or .json file (chosen by extension).
// Ensures: io naming the path if it cannot be read; invalid_argument for another extension;
// else as parse_topology_toml / parse_topology_json. Cost: O(file size + N^2).
inline result<topology_document> load_topology(const std::string& path) {
  auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() &&
           std::string_view(path).substr(path.size() - suffix.size()) == suffix;
  };
  const bool is_toml = ends_with(".toml"), is_json = ends_with(".json");
  if (!is_toml && !is_json)
    return error{errc::invalid_argument,
                 path + ": unknown topology file type (accepted extensions: .toml, .json)"};
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{errc::io, path + ": cannot open topology file"};
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return error{errc::io, path + ": read error"};
  const std::string text = buf.str();
  return is_toml ? parse_topology_toml(text, path) : parse_topology_json(text, path);
}

}  // namespace paco::place
