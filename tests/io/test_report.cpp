// io/table and io/progress: the tools' results tables and progress lines.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "paco/io/progress.hpp"
#include "paco/io/table.hpp"

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
