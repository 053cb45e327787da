#pragma once
// settings_file: a job's settings read from a TOML file and "section.key=value" items (--set),
// every key checked by name, every value by its field's type. What paco_train and job::run_main
// read their configuration with; each field's own range is job::validate's (job/validate.hpp).
//
//   setting_fields   every key a program reads, "section.key" → its field (add_settings: every
//                    key of job::settings; a program adds its own, e.g. its model's)
//   config_source    a configuration as it was given: the file's path and text and every --set;
//                    recorded in a run's directory, sent by rank 0 to an engine's other ranks
//   apply            a config_source onto the fields: the file, then each --set in order
//
// A value is refused, naming its key, when it does not fit its field: an unknown key (with the
// closest valid one), an integer outside its type's range (never narrowed), nan, ±inf or a
// float beyond float's range, a string where a number belongs.
//
//   job::settings s;
//   job::setting_fields f;
//   job::add_settings(f, s);
//   auto src = job::config_source::read("job.toml", {"dipaco.rounds=4"}).value_or_throw();
//   job::apply(f, src).throw_if_error();

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <toml++/toml.h>
#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"
#include "paco/core/spelling.hpp"
#include "paco/job/settings.hpp"

namespace paco::job {

namespace detail {

// The node's value as written, for errors: 4294967299, inf, '1e400' (an override that TOML
// could not read as a number arrives as a string), a table.
inline std::string shown(const toml::node& n) {
  std::ostringstream os;
  if (auto* i = n.as_integer())
    os << i->get();
  else if (auto* f = n.as_floating_point())
    os << f->get();
  else if (auto* s = n.as_string())
    os << "'" << s->get() << "'";
  else if (auto* b = n.as_boolean())
    os << (b->get() ? "true" : "false");
  else
    os << "a " << n.type();
  return os.str();
}

// "an integer in [-2147483648, 2147483647]": what an integer field of type T holds.
template <class T>
std::string integer_range() {
  return "an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
         std::to_string(std::numeric_limits<T>::max()) + "]";
}

// Sets dst from a TOML value. Ensures: dst holds exactly the value written, or is unchanged and
// the error names `key`: a value of another type (1 for a bool, 3.0 or "3" for an integer; an
// integer for a floating field is read as its value), an integer outside T's range (never
// narrowed), a floating value that is nan or ±inf ("must be a finite number"), or outside
// float's range for a float field.
template <class T>
status assign(T& dst, const toml::node& n, const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) {
    // Exact types only: toml++'s value<bool>() would read the integer 1 as true.
    if (auto* b = n.as_boolean()) return dst = b->get(), status{};
    return {errc::invalid_argument, key + " must be true or false, got " + shown(n)};
  } else if constexpr (std::is_integral_v<T>) {
    if (auto* i = n.as_integer(); i && std::in_range<T>(i->get()))  // 3.0 is no integer
      return dst = T(i->get()), status{};
    return {errc::invalid_argument, key + " must be " + integer_range<T>() + ", got " + shown(n)};
  } else if constexpr (std::is_floating_point_v<T>) {
    auto v = n.value<double>();
    if (!v || !std::isfinite(*v))
      return {errc::invalid_argument, key + " must be a finite number, got " + shown(n)};
    if (std::abs(*v) > double(std::numeric_limits<T>::max())) {
      std::ostringstream os;
      os << key << " must be a finite number in [" << -std::numeric_limits<T>::max() << ", "
         << std::numeric_limits<T>::max() << "] (a float), got " << shown(n);
      return {errc::invalid_argument, os.str()};
    }
    return dst = T(*v), status{};
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    auto* a = n.as_array();
    if (!a) return {errc::invalid_argument, key + " must be an array of strings"};
    std::vector<std::string> out;
    for (auto& e : *a) {
      auto* v = e.as_string();
      if (!v)
        return {errc::invalid_argument, key + " must be an array of strings, got " + shown(e)};
      out.push_back(v->get());
    }
    dst = std::move(out);
    return {};
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    auto* a = n.as_array();
    if (!a) return {errc::invalid_argument, key + " must be an array of integers, e.g. [2, 2]"};
    std::vector<int> out;
    for (auto& e : *a) {
      auto* v = e.as_integer();
      if (!v || !std::in_range<int>(v->get()))
        return {errc::invalid_argument,
                key + " must be an array of " + integer_range<int>() + ", got " + shown(e)};
      out.push_back(int(v->get()));
    }
    dst = std::move(out);
    return {};
  } else {
    static_assert(std::is_same_v<T, std::string>, "a setting is a bool, number, string or array");
    if (auto* v = n.as_string()) return dst = v->get(), status{};
    return {errc::invalid_argument, key + " must be a string, got " + shown(n)};
  }
}

// A field's value as TOML writes it (--help's listing).
template <class T>
std::string as_toml(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_arithmetic_v<T>) {
    std::ostringstream os;
    os << v;
    return os.str();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return nlohmann::json(v).dump();  // a TOML basic string is a JSON string
  } else {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + as_toml(v[i]);
    return s + "]";
  }
}

}  // namespace detail

// One line per (key, value), "  section.key = value" (a program's --help).
inline std::string listing_of(const std::vector<std::pair<std::string, std::string>>& values) {
  std::string out;
  for (const auto& [k, v] : values) out += "  " + k + " = " + v + "\n";
  return out;
}

// Every key a program's configuration reads. The fields are references: the setting_fields
// must not outlive the configuration it was built over (nor be copied with it).
class setting_fields {
 public:
  // Requires: field outlives *this; T is bool, an integer, float, double, std::string,
  // std::vector<int> or std::vector<std::string>. A key added twice names the later field.
  template <class T>
  void add(const std::string& key, T& field) {
    fields_[key] = {[&field, key](const toml::node& n) { return detail::assign(field, n, key); },
                    [&field] { return detail::as_toml(field); }};
  }

  // Sets `key` from a TOML value. Errors (invalid_argument): an unknown key, naming the closest
  // valid one when one is near; the value's (detail::assign).
  status set(const std::string& key, const toml::node& value) const {
    auto it = fields_.find(key);
    if (it == fields_.end()) {
      const auto near = closest_name(key, names());
      return {errc::invalid_argument,
              "unknown setting '" + key + "'" + (near ? " (did you mean '" + *near + "'?)" : "")};
    }
    return it->second.set(value);
  }

  // Every key, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [k, f] : fields_) out.push_back(k);
    return out;
  }

  // Every key with its current value as TOML writes it, sorted by key.
  std::vector<std::pair<std::string, std::string>> values() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [k, f] : fields_) out.emplace_back(k, f.show());
    return out;
  }

  // One line per key with its current value, "  section.key = value" (a program's --help).
  std::string listing() const { return listing_of(values()); }

 private:
  struct field {
    std::function<status(const toml::node&)> set;
    std::function<std::string()> show;
  };
  std::map<std::string, field> fields_;
};

// Adds every key of job::settings (train, data, output, dipaco, sync, launch, pipeline) over s.
inline void add_settings(setting_fields& f, settings& s) {
  auto& t = s.train;
  f.add("train.batch", t.batch);
  f.add("train.steps", t.steps);
  f.add("train.budget_s", t.budget_s);
  f.add("train.lr", t.lr);
  f.add("train.min_lr", t.min_lr);
  f.add("train.warmup", t.warmup);
  f.add("train.weight_decay", t.weight_decay);
  f.add("train.beta1", t.beta1);
  f.add("train.beta2", t.beta2);
  f.add("train.grad_clip", t.grad_clip);
  f.add("train.optimizer", t.optimizer);
  f.add("train.muon_lr", t.muon_lr);
  f.add("train.muon_momentum", t.muon_momentum);
  f.add("train.threads", t.threads);
  f.add("train.device", t.device);
  f.add("train.gemm", t.gemm);
  f.add("train.seed", t.seed);
  f.add("train.eval_every", t.eval_every);
  f.add("train.eval_batches", t.eval_batches);
  f.add("train.checkpoint_every", t.checkpoint_every);
  f.add("data.corpus", s.data.corpus);
  f.add("data.path", s.data.path);
  f.add("data.dir", s.data.dir);
  f.add("data.text_field", s.data.text_field);
  f.add("output.dir", s.output.dir);
  auto& d = s.dipaco;
  f.add("dipaco.grid", d.grid);
  f.add("dipaco.workers_per_path", d.workers_per_path);
  f.add("dipaco.rounds", d.rounds);
  f.add("dipaco.inner_steps", d.inner_steps);
  f.add("dipaco.pretrain_steps", d.pretrain_steps);
  f.add("dipaco.outer", d.outer);
  f.add("dipaco.outer_lr", d.outer_lr);
  f.add("dipaco.outer_momentum", d.outer_momentum);
  f.add("dipaco.outer_gap_penalty", d.outer_gap_penalty);
  f.add("dipaco.outer_clip", d.outer_clip);
  f.add("dipaco.outer_clip_threshold", d.outer_clip_threshold);
  f.add("dipaco.path_rescale", d.path_rescale);
  f.add("dipaco.weight_by_shard", d.weight_by_shard);
  f.add("dipaco.prefix", d.prefix);
  f.add("dipaco.reroute_every", d.reroute_every);
  f.add("dipaco.compress", d.compress);
  f.add("dipaco.lgreco_every", d.lgreco_every);
  f.add("dipaco.eval_split", d.eval_split);
  f.add("dipaco.stages", d.stages);
  f.add("dipaco.stage_split", d.stage_split);
  f.add("sync.mode", s.sync.mode);
  f.add("sync.train_budget_s", s.sync.train_budget_s);
  f.add("sync.pace", s.sync.pace);
  f.add("sync.overlap_steps", s.sync.overlap_steps);
  f.add("sync.alpha", s.sync.alpha);
  f.add("sync.quorum", s.sync.quorum);
  f.add("sync.grace", s.sync.grace);
  f.add("sync.max_staleness", s.sync.max_staleness);
  auto& p = s.pipeline;
  f.add("pipeline.stages", p.stages);
  f.add("pipeline.split", p.split);
  f.add("pipeline.schedule", p.schedule);
  f.add("pipeline.micro_batches", p.micro_batches);
  f.add("pipeline.queue_depth", p.queue_depth);
  f.add("pipeline.head", p.head);
  f.add("pipeline.readout_refresh", p.readout_refresh);
  f.add("pipeline.readout_delay", p.readout_delay);
  f.add("pipeline.hosts", p.hosts);
  f.add("pipeline.base_port", p.base_port);
  f.add("pipeline.link_mbps", p.link_mbps);
  f.add("pipeline.link_latency_ms", p.link_latency_ms);
  f.add("pipeline.timeout_s", p.timeout_s);
  f.add("pipeline.eval_tokens", p.eval_tokens);
  f.add("pipeline.activations", p.activations);
  auto& l = s.launch;
  f.add("launch.throttle", l.throttle);
  f.add("launch.mode", l.mode);
  f.add("launch.store_host", l.store_host);
  f.add("launch.base_port", l.base_port);
  f.add("launch.round_timeout_s", l.round_timeout_s);
  f.add("launch.peer_timeout_s", l.peer_timeout_s);
  f.add("launch.restarts", l.restarts);
  f.add("launch.link_mbps", l.link_mbps);
  f.add("launch.link_latency_ms", l.link_latency_ms);
  f.add("launch.link_streams", l.link_streams);
  f.add("launch.link_bdp_bytes", l.link_bdp_bytes);
  f.add("launch.metrics_port", l.metrics_port);
  f.add("launch.tls", l.tls);
  f.add("launch.tls_ca", l.tls_ca);
  f.add("launch.tls_cert", l.tls_cert);
  f.add("launch.tls_key", l.tls_key);
  f.add("launch.tls_peer_name", l.tls_peer_name);
}

// Every key of job::settings with its value in s, as TOML writes it, sorted by key (a status
// page's configuration, a program's --help).
inline std::vector<std::pair<std::string, std::string>> setting_values(const settings& s) {
  settings shown = s;
  setting_fields f;
  add_settings(f, shown);
  return f.values();
}

// Parses TOML text into a table (toml++ as built by Debian reports errors by throwing).
inline result<toml::table> parse_toml(const std::string& text) {
  try {
    return toml::parse(text);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << e.description() << " at line " << e.source().begin.line;
    return error(errc::invalid_argument, os.str());
  }
}

// The text of config file `path` (empty path: ""). Errors: not_found, io, naming it.
inline result<std::string> read_config_text(const std::filesystem::path& path) {
  if (path.empty()) return std::string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return error(errc::not_found, "config file '" + path.string() + "' does not exist");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  if (!in && !in.eof()) return error(errc::io, "config file '" + path.string() + "': cannot read");
  return os.str();
}

// A configuration as it was given: the config file's path and text (both empty: none) and
// every --set item in order.
struct config_source {
  std::string path;
  std::string text;
  std::vector<std::string> set;

  // Reads `path` (empty: no file). Errors: read_config_text's.
  static result<config_source> read(const std::filesystem::path& path,
                                    std::vector<std::string> set) {
    auto text = read_config_text(path);
    if (!text) return text.error();
    return config_source{path.string(), std::move(*text), std::move(set)};
  }

  // As JSON: what a run keeps in its directory (run_dir::config_record) and rank 0 sends the
  // other ranks of an engine's launch.
  std::string record() const {
    return nlohmann::json{{"config", path}, {"text", text}, {"set", set}}.dump();
  }

  // The source of a record (record()'s). Errors: protocol naming `origin` when it is no such
  // record.
  static result<config_source> of_record(const std::string& record, const std::string& origin) {
    const auto j = nlohmann::json::parse(record, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("config") || !j["config"].is_string() ||
        !j.contains("text") || !j["text"].is_string() || !j.contains("set") || !j["set"].is_array())
      return error(errc::protocol, origin + " holds no recorded configuration");
    config_source s{j["config"].get<std::string>(), j["text"].get<std::string>(), {}};
    for (const auto& item : j["set"]) {
      if (!item.is_string())
        return error(errc::protocol, origin + ": a --set item is not a string");
      s.set.push_back(item.get<std::string>());
    }
    return s;
  }

  // The arguments that give a child process of the program this configuration: --config PATH
  // and every --set (the file is read again there).
  std::vector<std::string> args() const {
    std::vector<std::string> a;
    if (!path.empty()) a.insert(a.end(), {"--config", path});
    for (const auto& o : set) a.insert(a.end(), {"--set", o});
    return a;
  }

  // Whether a --set item says launch.mode = "mpi" (launch.mode=mpi, launch.mode = "mpi", …).
  static bool says_mpi(const std::string& item) {
    const auto trim = [](std::string v) {
      const auto a = v.find_first_not_of(" \t"), b = v.find_last_not_of(" \t");
      return a == std::string::npos ? std::string() : v.substr(a, b - a + 1);
    };
    const auto eq = item.find('=');
    if (eq == std::string::npos || trim(item.substr(0, eq)) != "launch.mode") return false;
    std::string v = trim(item.substr(eq + 1));
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    return v == "mpi";
  }
};

// Applies src onto the fields: the file's text (errors say "config '<path>': …"), then each
// --set item "section.key=value" in order (a TOML value; a bare word is read as a string;
// errors say "--set: …"). Ensures: ok, or invalid_argument naming the key (the fields set before
// the error keep their new values).
inline status apply(const setting_fields& f, const config_source& src) {
  const auto table = [&](const toml::table& tbl, const std::string& where) -> status {
    for (auto& [sec, node] : tbl) {
      const std::string s(sec.str());
      auto* sub = node.as_table();
      if (!sub) return {errc::invalid_argument, where + ": '" + s + "' must be a [section]"};
      for (auto& [key, val] : *sub)
        if (auto st = f.set(s + "." + std::string(key.str()), val); !st)
          return {errc::invalid_argument, where + ": " + st.error().message};
    }
    return {};
  };
  if (!src.text.empty()) {
    const std::string origin = "config '" + src.path + "'";
    auto t = parse_toml(src.text);
    if (!t) return {errc::invalid_argument, origin + ": " + t.error().message};
    if (auto s = table(*t, origin); !s) return s;
  }
  for (const auto& o : src.set) {
    const auto eq = o.find('='), dot = o.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      return {errc::invalid_argument, "--set '" + o + "' must look like section.key=value"};
    const std::string sec = o.substr(0, dot), key = o.substr(dot + 1, eq - dot - 1);
    const std::string val = o.substr(eq + 1);
    auto t = parse_toml("[" + sec + "]\n" + key + " = " + val);
    if (!t) {  // bare strings are allowed: retry quoted
      t = parse_toml("[" + sec + "]\n" + key + " = \"" + val + "\"");
      if (!t) return {errc::invalid_argument, "--set '" + o + "': cannot parse the value"};
    }
    if (auto s = table(*t, "--set"); !s) return s;
  }
  return {};
}

}  // namespace paco::job
