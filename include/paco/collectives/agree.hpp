#pragma once
// agree: before a group works together, every rank checks that all ranks hold the same list of
// key = value fields (a configuration's fingerprint: model sizes, codec, rounds …), and every
// rank refuses a difference with the same sentence, naming the rank, the field and both values:
//
//   "rank 1's --compress is int8 but rank 0's is bf16"
//
// Each rank's list is serialised (a count, then each key and value as a length and its bytes)
// and all-gathered: the lengths first, then the lists padded to the longest. Every rank then
// compares the same p lists with rank 0's and reaches the same verdict on its own, so no rank
// goes on while another refuses. agree_ok does the same with each rank's status: a failure on
// one rank (a missing file) stops every rank, each naming the rank that failed and its error.
//
//   std::vector<collectives::agree_field> f{{"--inner", "60"}, {"--compress", "int8"}};
//   if (auto s = collectives::agree(t, f, o); !s) return s;   // the same error on every rank

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paco/collectives/all_gather.hpp"
#include "paco/collectives/options.hpp"
#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"

namespace paco::collectives {

// One item of a fingerprint. Keys name what a user would change (a flag, a config field).
struct agree_field {
  std::string key;
  std::string value;
  friend bool operator==(const agree_field&, const agree_field&) = default;
};

// "key=value key=value …": the form io::check_config reads (a checkpoint's "config").
// Requires: no key or value holds a space or (keys) an '='.
inline std::string join_fields(std::span<const agree_field> fields) {
  std::string s;
  for (const auto& f : fields) {
    if (!s.empty()) s += ' ';
    s += f.key + "=" + f.value;
  }
  return s;
}

// The longest serialised list (or agree_ok message) a rank may send.
inline constexpr std::size_t agree_max_bytes = std::size_t(1) << 20;

namespace detail {

inline void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(std::byte((v >> (8 * i)) & 0xffu));
}
inline void put_string(std::vector<std::byte>& out, std::string_view s) {
  put_u32(out, std::uint32_t(s.size()));
  const auto* b = reinterpret_cast<const std::byte*>(s.data());
  out.insert(out.end(), b, b + s.size());
}

// count, then per field: key length, key, value length, value (lengths u32 little-endian).
inline std::vector<std::byte> serialise(std::span<const agree_field> fields) {
  std::vector<std::byte> out;
  put_u32(out, std::uint32_t(fields.size()));
  for (const auto& f : fields) {
    put_string(out, f.key);
    put_string(out, f.value);
  }
  return out;
}

// Ensures: the fields of serialise's output; nullopt for anything else (truncated, trailing).
inline std::optional<std::vector<agree_field>> parse(std::span<const std::byte> in) {
  std::size_t at = 0;
  auto u32 = [&](std::uint32_t& v) {
    if (in.size() - at < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t(in[at + std::size_t(i)]) << (8 * i);
    at += 4;
    return true;
  };
  auto str = [&](std::string& s) {
    std::uint32_t n = 0;
    if (!u32(n) || in.size() - at < n) return false;
    s.assign(reinterpret_cast<const char*>(in.data() + at), n);
    at += n;
    return true;
  };
  std::uint32_t count = 0;
  if (!u32(count)) return std::nullopt;
  std::vector<agree_field> fields;
  for (std::uint32_t i = 0; i < count; ++i) {
    agree_field f;
    if (!str(f.key) || !str(f.value)) return std::nullopt;
    fields.push_back(std::move(f));
  }
  if (at != in.size()) return std::nullopt;
  return fields;
}

// Every rank's bytes, in rank order: an all-gather of the lengths (tag o.tag), then of the
// byte strings padded to the longest (tag o.tag + 1). Errors: the all-gathers'; too_large
// naming the rank for more than agree_max_bytes.
template <net::Transport T>
result<std::vector<std::vector<std::byte>>> gather_bytes(T& t, std::span<const std::byte> mine,
                                                         const collective_options& o) {
  const std::size_t p = std::size_t(t.size()), me = std::size_t(t.rank());
  std::vector<std::uint64_t> sizes(p, 0);
  sizes[me] = mine.size();
  if (auto s = all_gather(t, std::span<std::uint64_t>(sizes), o); !s) return s.error();
  const auto widest = std::max_element(sizes.begin(), sizes.end());
  if (*widest > agree_max_bytes)
    return error(errc::too_large, "rank " + std::to_string(widest - sizes.begin()) + " sends " +
                                      std::to_string(*widest) + " bytes, at most " +
                                      std::to_string(agree_max_bytes) + " are accepted");
  const std::size_t width = *widest;
  std::vector<std::uint8_t> all(p * width);  // not std::byte: the ring engine needs arithmetic
  if (!mine.empty()) std::memcpy(all.data() + me * width, mine.data(), mine.size());
  auto co = o;
  co.tag = o.tag + 1;
  if (auto s = all_gather(t, std::span<std::uint8_t>(all), co); !s) return s.error();
  std::vector<std::vector<std::byte>> out(p);
  for (std::size_t r = 0; r < p; ++r) {
    const auto* b = reinterpret_cast<const std::byte*>(all.data() + r * width);
    out[r].assign(b, b + sizes[r]);
  }
  return out;
}

inline std::string shown(const std::string& v) {
  return v.empty() ? std::string("(empty)") : v;
}

// The first difference of rank r's fields from rank 0's (matched by key), or "" when they are
// equal; `more` counts the differences after the first.
inline std::string first_difference(int r, const std::vector<agree_field>& zero,
                                    const std::vector<agree_field>& other, std::size_t& more) {
  const std::string who = "rank " + std::to_string(r);
  const std::string counts = other.size() == zero.size()
                                 ? std::string()
                                 : "; " + who + " lists " + std::to_string(other.size()) +
                                       " fields, rank 0 " + std::to_string(zero.size());
  std::string first;
  auto note = [&](std::string s) {
    if (first.empty())
      first = std::move(s);
    else
      ++more;
  };
  auto find = [](const std::vector<agree_field>& in, const std::string& key) {
    return std::find_if(in.begin(), in.end(), [&](const agree_field& f) { return f.key == key; });
  };
  for (const auto& z : zero) {
    const auto it = find(other, z.key);
    if (it == other.end())
      note(who + " has no " + z.key + " (rank 0's is " + shown(z.value) + counts + ")");
    else if (it->value != z.value)
      note(who + "'s " + z.key + " is " + shown(it->value) + " but rank 0's is " + shown(z.value));
  }
  for (const auto& a : other)
    if (find(zero, a.key) == zero.end())
      note(who + "'s " + a.key + " (" + shown(a.value) + ") is not on rank 0" +
           (counts.empty() ? "" : " (" + counts.substr(2) + ")"));
  return first;
}

}  // namespace detail

// agree(t, fields, options): every rank checks that every rank passed the same fields as
// rank 0.
// Requires: every rank of t calls it with the same tag, at the same point of its collectives;
//   keys are unique within a list.
// Ensures: ok on every rank iff every rank holds rank 0's keys with rank 0's values (fields are
//   matched by key; their order does not matter); otherwise errc::mismatch on every rank with
//   the same message: the lowest rank that differs and its first difference, in rank 0's order —
//   "rank R's KEY is X but rank 0's is Y", "rank R has no KEY (rank 0's is Y; …counts)" or
//   "rank R's KEY (X) is not on rank 0" — then "(and N more differences)" when there are more.
//   On a collective's error (a rank missing: timeout; lost: peer_lost), returns it by
//   options.until, the step and peer named.
// Cost: two all-gathers: (p−1)·8 bytes of lengths, then (p−1)·L bytes, L the longest
//   serialised list (4 + Σ 8 + |key| + |value| bytes).
template <net::Transport T>
status agree(T& t, std::span<const agree_field> fields, const collective_options& o = {}) {
  auto all = detail::gather_bytes(t, detail::serialise(fields), o);
  if (!all) return paco::error{all.error().code, "agree: " + all.error().message};
  auto zero = detail::parse((*all)[0]);
  if (!zero) return {errc::protocol, "agree: rank 0's fields do not parse"};
  std::string first;
  std::size_t more = 0;
  for (int r = 1; r < t.size(); ++r) {
    auto other = detail::parse((*all)[std::size_t(r)]);
    std::string d = other ? detail::first_difference(r, *zero, *other, more)
                          : "rank " + std::to_string(r) + "'s fields do not parse";
    if (d.empty()) continue;
    if (first.empty())
      first = std::move(d);
    else
      ++more;
  }
  if (first.empty()) return {};
  if (more > 0)
    first += " (and " + std::to_string(more) + " more difference" + (more > 1 ? "s" : "") + ")";
  return {errc::mismatch, first};
}

// agree_ok(t, mine, options): every rank learns whether every rank's `mine` is ok.
// Requires: as agree's.
// Ensures: ok on every rank iff every rank's `mine` is ok; otherwise a rank that failed
//   returns its own error, and every other rank "rank f: <f's message>" with f's paco error
//   code (errc::io when f's error is of another category), f the lowest rank that failed.
//   Collective errors as agree's.
// Cost: as agree's, L the longest message.
template <net::Transport T>
status agree_ok(T& t, const status& mine, const collective_options& o = {}) {
  std::vector<agree_field> own;
  if (!mine.ok()) {
    const auto& e = mine.error();
    const int code = e.code.category() == paco_category() ? e.code.value() : int(errc::io);
    own.push_back({std::to_string(code), e.message.empty() ? e.code.message() : e.message});
  }
  auto all = detail::gather_bytes(t, detail::serialise(own), o);
  if (!all) return paco::error{all.error().code, "agree_ok: " + all.error().message};
  for (int r = 0; r < t.size(); ++r) {
    auto f = detail::parse((*all)[std::size_t(r)]);
    if (!f)
      return {errc::protocol, "agree_ok: rank " + std::to_string(r) + "'s verdict does not parse"};
    if (f->empty()) continue;
    if (!mine.ok()) return mine;
    int code = int(errc::io);
    try {
      code = std::stoi((*f)[0].key);
    } catch (const std::exception&) {
    }
    return {static_cast<errc>(code), "rank " + std::to_string(r) + ": " + (*f)[0].value};
  }
  return {};
}

}  // namespace paco::collectives
