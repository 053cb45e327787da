#pragma once
// json_read: how paco reads a JSON document it did not just build — a parse that refuses nesting
// deeper than a bound, and one checked integer reader. Every JSON file of the project goes
// through them (placement, topology, routing.json, the JSONL logs, safetensors headers and the
// JSON inside their metadata).
//
//   json_parse(text, origin)            a value nested at most json_max_depth (64) levels
//   json_int<Int>(j, what, lo, hi)      an integer in [lo, hi], checked before narrowing
//   json_ints<Int>(j, what, lo, hi)     an array of them
//
// Why the bound: nlohmann/json (3.11) parses and destroys a value without recursion, but copies,
// dumps and compares it recursively, one stack frame per level: a placement file whose "n" was
// nested 10^6 deep (2 MB of brackets) parsed fine and crashed with SIGSEGV when read_placement
// copied the field. json_parse refuses such a text before building anything, so no later walk
// can overflow the stack. Why the checked reader: get<int>() wraps 4294967304 to 8 and truncates
// 8.9 to 8, silently; json_int compares the value as JSON holds it (signed or unsigned 64-bit)
// with [lo, hi] first, and refuses anything that is not an integer. A float is refused even when
// whole (8.0): paco writes its integers as integers, so a float there was written by hand.

#include <nlohmann/json.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::io {

// The deepest nesting of arrays and objects json_parse accepts unless told otherwise. paco's own
// files nest at most 4 levels (a store checkpoint's layout metadata); at 64 every recursive walk
// of a parsed value stays within a few kB of stack.
inline constexpr int json_max_depth = 64;

// The byte offset of the first '[' or '{' outside strings that opens level max_depth + 1 (a
// scalar is level 0, [] level 1, [[]] level 2), or npos when text nests at most max_depth deep.
// Requires: nothing (text need not be valid JSON). Ensures: for valid JSON, npos iff the value
// nests at most max_depth levels. Cost: one pass over text, no allocation.
inline std::size_t json_nesting_beyond(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;  // below 0 only in invalid text, which the parser refuses
    }
  }
  return std::string_view::npos;
}

// Parses the JSON text of the document `origin` (a quoted file name, "gpt config", …).
// Requires: max_depth ≥ 1. Ensures: the value, nested at most max_depth levels; else too_large
// "<origin>: JSON nested deeper than <max_depth> levels (byte <k> opens level <max_depth + 1>)",
// checked before the parser builds anything, or corrupt "<origin>: not valid JSON (<the
// parser's message, with its line and column>)". Cost: O(text size); no recursion.
inline result<nlohmann::json> json_parse(std::string_view text, std::string_view origin,
                                         int max_depth = json_max_depth) {
  if (const auto at = json_nesting_beyond(text, max_depth); at != std::string_view::npos)
    return error(errc::too_large, std::string(origin) + ": JSON nested deeper than " +
                                      std::to_string(max_depth) + " levels (byte " +
                                      std::to_string(at) + " opens level " +
                                      std::to_string(max_depth + 1) + ")");
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();  // "[json.exception.parse_error.101] parse error at line 1, …"
    if (const auto close = why.find("] "); why.starts_with("[json.") && close != std::string::npos)
      why.erase(0, close + 2);
    return error(errc::corrupt, std::string(origin) + ": not valid JSON (" + why + ")");
  }
}

// json_parse of everything left in `in`. Ensures: io "<origin>: read error" when the stream
// fails before its end; else json_parse's. Cost: O(size): the text is read whole first.
inline result<nlohmann::json> json_parse(std::istream& in, std::string_view origin,
                                         int max_depth = json_max_depth) {
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return error(errc::io, std::string(origin) + ": read error");
  return json_parse(text.view(), origin, max_depth);
}

namespace detail {

// j as a short text for an error message: numbers, booleans and null as JSON writes them, a
// string quoted and cut at 40 characters, an array or object by its kind (never dumped: that
// would recurse through a value json_parse did not bound).
inline std::string json_shown(const nlohmann::json& j) {
  if (j.is_array() || j.is_object()) return std::string("an ") + j.type_name();
  constexpr auto replace = nlohmann::json::error_handler_t::replace;  // a cut UTF-8 sequence
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s.size() > 40) return nlohmann::json(s.substr(0, 40)).dump(-1, ' ', false, replace) + "…";
  }
  return j.dump(-1, ' ', false, replace);
}

}  // namespace detail

// The integer types json_int reads into: every integral type but bool.
template <class T>
concept JsonInteger = std::integral<T> && !std::same_as<T, bool>;

// The integer at j as an Int, checked before narrowing.
// Requires: lo ≤ hi. Ensures: the value when j is an integer (nlohmann's signed or unsigned
// kind) in [lo, hi]; else corrupt when j is not an integer (a float, 8.0 too; a string, "8";
// a boolean; null; an array or object) and invalid_argument when it is one outside [lo, hi],
// both "<what>: expected an integer in [lo, hi], got <j>". Cost: O(1).
template <JsonInteger Int>
result<Int> json_int(const nlohmann::json& j, std::string_view what,
                     Int lo = std::numeric_limits<Int>::min(),
                     Int hi = std::numeric_limits<Int>::max()) {
  PACO_ASSERT(lo <= hi, "json_int: lo <= hi");
  const auto refuse = [&](errc c) {
    return error(c, std::string(what) + ": expected an integer in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + detail::json_shown(j));
  };
  // nlohmann keeps a non-negative literal as unsigned 64-bit, a negative one as signed 64-bit:
  // each is compared with [lo, hi] in its own type (std::cmp_*), so nothing is converted first.
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (std::cmp_less(v, lo) || std::cmp_greater(v, hi)) return refuse(errc::invalid_argument);
    return static_cast<Int>(v);
  }
  if (j.is_number_integer()) {
    const auto v = j.get<std::int64_t>();
    if (std::cmp_less(v, lo) || std::cmp_greater(v, hi)) return refuse(errc::invalid_argument);
    return static_cast<Int>(v);
  }
  return refuse(errc::corrupt);
}

// The array at j as Ints, each checked by json_int (named "<what>[i]").
// Requires: lo ≤ hi. Ensures: the values when j is an array of integers in [lo, hi]; else
// corrupt "<what>: expected an array of integers, got <j>" or json_int's error for the first
// element that is not one. Cost: O(size of j).
template <JsonInteger Int>
result<std::vector<Int>> json_ints(const nlohmann::json& j, std::string_view what,
                                   Int lo = std::numeric_limits<Int>::min(),
                                   Int hi = std::numeric_limits<Int>::max()) {
  if (!j.is_array())
    return error(errc::corrupt, std::string(what) + ": expected an array of integers, got " +
                                    detail::json_shown(j));
  std::vector<Int> out;
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    auto v = json_int<Int>(j[i], std::string(what) + "[" + std::to_string(i) + "]", lo, hi);
    if (!v) return v.error();
    out.push_back(*v);
  }
  return out;
}

}  // namespace paco::io
