// io/table and io/progress: the tools' results tables and progress lines.
#include <catch2/catch.hpp>

#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "paco/io/progress.hpp"
#include "paco/io/table.hpp"
#include "paco/io/timestamped_lines.hpp"

using namespace paco;

TEST_CASE("table: columns size to their widest cell; number columns align right", "[io][table]") {
  io::table t({"row", "val bpb", "bytes sent"});
  t.add({"dense", io::cell(3.56641, 4), io::cell(7.04, 1, " MB")});
  t.add({"dipaco_2x2_reroute64", io::cell(12.5, 4), ""});
  REQUIRE(t.rows() == 2);
  REQUIRE(t.str() ==
          "| row                  | val bpb | bytes sent |\n"
          "|----------------------|---------|------------|\n"
          "| dense                |  3.5664 |     7.0 MB |\n"
          "| dipaco_2x2_reroute64 | 12.5000 |            |\n");
}

TEST_CASE("table: a column with any word in it aligns left; UTF-8 takes one column a character",
          "[io][table]") {
  io::table t({"codec", "vs fp32", "note"});
  t.add({"int8", io::cell(0.123, 2, "%", true), "θ only"});
  t.add({"lgreco:int", io::cell(-1.5, 2, "%", true), "4x8"});
  REQUIRE(t.str() ==
          "| codec      | vs fp32 | note   |\n"
          "|------------|---------|--------|\n"
          "| int8       |  +0.12% | θ only |\n"
          "| lgreco:int |  -1.50% | 4x8    |\n");
}

TEST_CASE("table: a row of the wrong length is refused, naming both counts", "[io][table]") {
  io::table t({"a", "b"});
  REQUIRE_THROWS_WITH(t.add({"1"}), Catch::Contains("1 cells for 2 columns"));
  REQUIRE(t.rows() == 0);
  REQUIRE(io::table({"a"}).str() == "| a |\n|---|\n");
}

TEST_CASE("progress: update_smoothed shows the moving average of the values", "[io][progress]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  {
    io::progress bar("train", 3, {.out = f});
    bar.update_smoothed(1, "loss", 1.0);  // not a tty: no line before the last update
    bar.update_smoothed(2, "loss", 3.0);
    bar.update_smoothed(3, "loss", 3.0);  // 0.98 (0.98 + 0.06) + 0.06 = 1.0792
  }
  std::rewind(f);
  std::string text(256, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  REQUIRE(text.find("3/3") != std::string::npos);
  REQUIRE(text.find("loss 1.079 ") != std::string::npos);
  REQUIRE(text.find("2/3") == std::string::npos);
}

TEST_CASE("timestamp_lines: each line once, stamped at its start, every byte through in order",
          "[io][log]") {
  FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  FILE* out = file;
  REQUIRE(io::timestamp_lines(out));
  REQUIRE(out != file);
  std::fprintf(out, "store: serving %d modules\n", 3);
  std::fprintf(out, "a line in ");  // one line written in three pieces: one stamp
  std::fprintf(out, "three ");
  std::fprintf(out, "pieces\nand two\nlines at once\n");
  std::fputs("no newline at the end", out);
  REQUIRE(std::fclose(out) == 0);  // flushed; the file stays open
  std::rewind(file);
  std::string text;
  for (int c; (c = std::fgetc(file)) != EOF;) text += char(c);
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < text.size();) {
    const auto nl = text.find('\n', at);
    lines.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    at = nl == std::string::npos ? text.size() : nl + 1;
  }
  const std::regex stamped(R"(^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z (.*)$)");
  const std::vector<std::string> want{"store: serving 3 modules", "a line in three pieces",
                                      "and two", "lines at once", "no newline at the end"};
  REQUIRE(lines.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    std::smatch m;
    INFO(lines[i]);
    REQUIRE(std::regex_match(lines[i], m, stamped));
    CHECK(m[8].str() == want[i]);
    CHECK(std::stoi(m[1].str()) >= 2024);
    CHECK(std::stoi(m[4].str()) < 24);
  }
  std::fclose(file);
}
