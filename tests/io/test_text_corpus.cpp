// io/text_corpus: a directory of text files (domain sub-folders) and JSONL as a corpus; the
// errors that name the file; the deterministic split; load_corpus; the multi-domain mix corpus.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "paco/io/io.hpp"
#include "paco/testing/files.hpp"

using namespace paco;
namespace fs = std::filesystem;

namespace {
std::vector<std::string> names_of(const io::corpus& c) {
  std::vector<std::string> v;
  for (auto& d : c.docs) v.push_back(d.name);
  return v;
}
// The error of r, which must have failed with `code`; its message must contain every `parts`.
template <class R>
void require_error(const R& r, errc code, std::initializer_list<std::string> parts) {
  REQUIRE(!r.ok());
  INFO(r.error().what());
  REQUIRE(r.error().code == code);
  for (auto& p : parts) REQUIRE(r.error().message.find(p) != std::string::npos);
}
}  // namespace

TEST_CASE("utf8_error_offset accepts UTF-8 and points at the first bad byte", "[io][text]") {
  constexpr auto npos = std::string_view::npos;
  REQUIRE(io::utf8_error_offset("") == npos);
  REQUIRE(io::utf8_error_offset("plain ascii\n") == npos);
  REQUIRE(io::utf8_error_offset("caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e \xf4\x8f\xbf\xbf") ==
          npos);
  REQUIRE(io::utf8_error_offset("abc\xff") == 3);            // never a UTF-8 byte
  REQUIRE(io::utf8_error_offset("ab\x80") == 2);             // a lone continuation byte
  REQUIRE(io::utf8_error_offset("a\xc0\xaf") == 1);          // overlong '/'
  REQUIRE(io::utf8_error_offset("a\xe0\x80\xaf") == 1);      // overlong, three bytes
  REQUIRE(io::utf8_error_offset("\xed\xa0\x80") == 0);       // a surrogate
  REQUIRE(io::utf8_error_offset("x\xf4\x90\x80\x80") == 1);  // above U+10FFFF
  REQUIRE(io::utf8_error_offset("xy\xe2\x82") == 2);         // cut short at the end
  REQUIRE(io::utf8_error_offset("\xc3(") == 0);              // a bad continuation
}

TEST_CASE("load_text_dir: one document per file, the first sub-folder is the domain",
          "[io][text]") {
  auto d = testing::fresh_dir("text_dir");
  testing::write_file(d / "prose" / "b.txt", "Second prose document.\n");
  testing::write_file(d / "prose" / "a.txt", "First prose document.\n");
  testing::write_file(d / "code" / "pkg" / "deep.py", "def f():\n    return 1\n");
  testing::write_file(d / "readme", "a file in the root, caf\xc3\xa9\n");
  testing::write_file(d / ".manifest", "hidden files are skipped");
  testing::write_file(d / "code" / ".git" / "HEAD", "hidden folders too");
  auto c = io::load_text_dir(d);
  REQUIRE(c.ok());
  REQUIRE(names_of(*c) ==
          std::vector<std::string>{"code/pkg/deep.py", "prose/a.txt", "prose/b.txt", "readme"});
  REQUIRE(c->docs[0].domain == "code");
  REQUIRE(c->docs[1].domain == "prose");
  REQUIRE(c->docs[1].text == "First prose document.\n");
  REQUIRE(c->docs[3].domain == "");
  REQUIRE(c->docs[3].genre == '?');
  REQUIRE(c->domains() == std::vector<std::string>{"", "code", "prose"});
  REQUIRE(c->of_domain("prose").docs.size() == 2);
  REQUIRE(c->source == d.string());
  auto other = io::load_text_dir(d, {.root_domain = "misc"});
  REQUIRE(other->docs[3].domain == "misc");
  fs::remove_all(d);
}

TEST_CASE("the split of a directory corpus depends on names only: same on every copy",
          "[io][text]") {
  auto a = testing::fresh_dir("text_split_a"), b = testing::fresh_dir("text_split_b");
  std::vector<std::string> files;
  for (int i = 0; i < 120; ++i)
    files.push_back((i % 3 == 0 ? "x/" : "y/") + std::to_string(i * 7919 % 1000) + ".txt");
  for (auto& f : files) testing::write_file(a / f, "document " + f + "\n");
  for (auto it = files.rbegin(); it != files.rend(); ++it)  // written in the other order
    testing::write_file(b / *it, "document " + *it + "\n");
  auto ca = io::load_corpus("files", a), cb = io::load_corpus("files", b);
  REQUIRE(ca.ok());
  REQUIRE(cb.ok());
  REQUIRE(names_of(*ca) == names_of(*cb));
  auto sorted = names_of(*ca);
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(names_of(*ca) == sorted);
  std::size_t total = 0;
  for (auto s : {io::split::train, io::split::validation, io::split::test}) {
    auto sa = ca->subset(s), sb = cb->subset(s);
    REQUIRE(names_of(sa) == names_of(sb));
    for (auto& doc : sa.docs) REQUIRE(io::split_of(doc.name, 0.1, 0.1) == s);
    total += sa.docs.size();
  }
  REQUIRE(total == 120);
  REQUIRE(io::check_splits(*ca).ok());
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("load_text_dir names the file and the problem", "[io][text]") {
  auto d = testing::fresh_dir("text_bad");
  require_error(io::load_text_dir(d / "nope"), errc::not_found, {"nope", "does not exist"});
  require_error(io::load_text_dir(d), errc::not_found, {d.string(), "holds no files"});
  testing::write_file(d / "ok.txt", "fine\n");

  testing::write_file(d / "empty.txt", "");
  require_error(io::load_text_dir(d), errc::corrupt, {"empty.txt", "is empty"});
  testing::write_file(d / "empty.txt", " \n\t\n");
  require_error(io::load_text_dir(d), errc::corrupt, {"empty.txt", "only white space"});
  fs::remove(d / "empty.txt");

  testing::write_file(d / "dom" / "latin1.txt", "na\xefve\n");
  require_error(io::load_text_dir(d), errc::corrupt,
                {"dom/latin1.txt", "not valid UTF-8", "byte offset 2"});
  fs::remove(d / "dom" / "latin1.txt");

  fs::create_symlink(d / "gone.txt", d / "dangling.txt");
  require_error(io::load_text_dir(d), errc::io, {"dangling.txt", "cannot read"});
  fs::remove(d / "dangling.txt");

  if (::geteuid() != 0) {  // root reads every file whatever its mode
    testing::write_file(d / "secret.txt", "no access\n");
    fs::permissions(d / "secret.txt", fs::perms::none);
    require_error(io::load_text_dir(d), errc::io, {"secret.txt", "cannot read"});
    fs::remove(d / "secret.txt");
  }
  REQUIRE(io::load_text_dir(d).ok());
  fs::remove_all(d);
}

TEST_CASE("load_jsonl: text, domain and name fields; names default to file:line", "[io][text]") {
  auto d = testing::fresh_dir("text_jsonl");
  testing::write_file(d / "docs.jsonl",
                      "{\"text\": \"first document\\n\", \"domain\": \"news\"}\n"
                      "\n"
                      "{\"text\": \"second, caf\xc3\xa9\", \"id\": 17, \"extra\": [1, 2]}\n"
                      "{\"body\": \"third\", \"name\": \"the-third\", \"kind\": \"code\"}\n");
  auto c = io::load_jsonl(d / "docs.jsonl", {.text_field = "text"});
  REQUIRE(!c.ok());  // line 4 has no "text"
  require_error(c, errc::corrupt, {"docs.jsonl", "line 4", "\"text\""});

  testing::write_file(d / "docs.jsonl",
                      "{\"text\": \"first document\\n\", \"domain\": \"news\"}\n"
                      "\n"
                      "{\"text\": \"second, caf\xc3\xa9\", \"id\": 17, \"extra\": [1, 2]}\n"
                      "{\"text\": \"third\", \"name\": \"the-third\"}");
  c = io::load_corpus("files", d / "docs.jsonl");
  REQUIRE(c.ok());
  REQUIRE(c->docs.size() == 3);
  REQUIRE(names_of(*c) == std::vector<std::string>{"docs.jsonl:1", "17", "the-third"});
  REQUIRE(c->docs[0].text == "first document\n");
  REQUIRE(c->docs[0].domain == "news");
  REQUIRE(c->docs[1].text == "second, caf\xc3\xa9");
  REQUIRE(c->docs[1].domain == "");
  REQUIRE(c->source == (d / "docs.jsonl").string());

  testing::write_file(d / "other.jsonl", "{\"body\": \"x\", \"kind\": \"code\"}\n");
  auto o = io::load_jsonl(d / "other.jsonl", {.text_field = "body", .domain_field = "kind"});
  REQUIRE(o.ok());
  REQUIRE(o->docs[0].text == "x");
  REQUIRE(o->docs[0].domain == "code");
  REQUIRE(o->docs[0].name == "other.jsonl:1");
  fs::remove_all(d);
}

TEST_CASE("load_jsonl names the file, the line and the problem", "[io][text]") {
  auto d = testing::fresh_dir("text_jsonl_bad");
  const auto f = d / "c.jsonl";
  auto expect = [&](const std::string& content, errc code, std::initializer_list<std::string> p) {
    testing::write_file(f, content);
    require_error(io::load_jsonl(f), code, p);
  };
  require_error(io::load_jsonl(d / "missing.jsonl"), errc::not_found, {"missing.jsonl"});
  expect("", errc::corrupt, {"c.jsonl", "is empty"});
  expect("\n\n", errc::corrupt, {"c.jsonl", "only white space"});
  expect("{\"text\": \"ok\"}\n[1, 2]\n", errc::corrupt, {"c.jsonl", "line 2", "not a JSON object"});
  expect("{\"text\": \"ok\"}\n{\"text\": \n", errc::corrupt, {"line 2", "not valid JSON"});
  expect("{\"text\": 5}\n", errc::corrupt, {"line 1", "no string field \"text\""});
  expect("{\"txt\": \"a\"}\n", errc::corrupt, {"line 1", "no string field \"text\""});
  expect("{\"text\": \"  \"}\n", errc::corrupt, {"line 1", "\"text\" is empty"});
  expect("{\"text\": \"a\", \"domain\": 3}\n", errc::corrupt, {"line 1", "\"domain\""});
  expect("{\"text\": \"a\", \"id\": [1]}\n", errc::corrupt, {"line 1", "\"id\""});
  expect("{\"text\": \"a\", \"id\": \"x\"}\n{\"text\": \"b\", \"id\": \"x\"}\n", errc::corrupt,
         {"line 2", "'x' appears twice"});
  expect("{\"text\": \"ok\"}\n{\"text\": \"na\xefve\"}\n", errc::corrupt,
         {"c.jsonl", "not valid UTF-8", "byte offset 27"});
  require_error(io::load_jsonl(d), errc::io, {"not a regular file"});
  fs::remove_all(d);
}

TEST_CASE("check_splits names the split left empty", "[io][text]") {
  io::corpus c;
  c.source = "/data/tiny";
  require_error(io::check_splits(c), errc::invalid_argument, {"/data/tiny", "no documents"});
  c.docs.push_back({"only-one", '?', "text\n", ""});
  const auto s = io::split_of("only-one", 0.1, 0.1);
  REQUIRE(s == io::split::train);  // so validation is the first empty split
  require_error(io::check_splits(c), errc::invalid_argument,
                {"validation split", "/data/tiny", "1 documents", "0.1"});
  for (int i = 0; i < 200; ++i) c.docs.push_back({std::to_string(1000 + i), '?', "t\n", ""});
  REQUIRE(io::check_splits(c).ok());
  require_error(io::check_splits(c, 0.1, 0.0), errc::invalid_argument, {"test split"});
}

TEST_CASE("load_corpus dispatches on the kind and names a bad one", "[io][text]") {
  auto d = testing::fresh_dir("text_dispatch");
  testing::write_file(d / "a.txt", "hello\n");
  REQUIRE(io::load_corpus("files", d)->docs.size() == 1);
  require_error(io::load_corpus("files", ""), errc::invalid_argument, {"\"files\" needs a path"});
  require_error(io::load_corpus("files", d / "nope"), errc::not_found, {"nope"});
  require_error(io::load_corpus("wiki", d), errc::invalid_argument,
                {"'wiki'", "\"brown\" or \"files\""});
  require_error(io::load_corpus("brown", d / "nope"), errc::not_found, {"nope"});
  fs::remove_all(d);
}

TEST_CASE("the mix corpus: four domains, each split non-empty in every domain", "[io][text]") {
  const auto dir = io::default_mix_dir();
  if (!fs::exists(dir / ".complete")) {
    WARN("mix corpus not built at " << dir << " (scripts/mix_corpus.sh builds it)");
    return;
  }
  auto c = io::load_corpus("files", dir);
  REQUIRE(c.ok());
  REQUIRE(c->domains() == std::vector<std::string>{"c", "man", "prose", "python"});
  REQUIRE(io::check_splits(*c).ok());
  for (auto& dom : c->domains()) {
    INFO(dom);
    auto part = c->of_domain(dom);
    REQUIRE(part.docs.size() >= 60);
    REQUIRE(part.bytes() > 800'000);
    REQUIRE(io::check_splits(part).ok());
    for (auto& doc : part.docs) {
      REQUIRE(doc.text.size() >= 1536);  // scripts/mix_corpus.py: MIN_BYTES, MAX_BYTES
      REQUIRE(doc.text.size() <= 16384);
    }
  }
  // The prose domain is Brown text as load_brown rebuilds it (the script ports the tag stripper).
  auto brown = io::load_brown(io::default_brown_dir());
  if (!brown) return;
  std::size_t compared = 0;
  for (auto& doc : c->of_domain("prose").docs) {
    const std::string id = fs::path(doc.name).stem().string();  // "prose/ca10.txt" → "ca10"
    auto it = std::find_if(brown->docs.begin(), brown->docs.end(),
                           [&](const io::document& b) { return b.name == id; });
    REQUIRE(it != brown->docs.end());
    REQUIRE(it->text.starts_with(doc.text));
    ++compared;
  }
  REQUIRE(compared >= 60);
}
