// io/json_read.hpp: the bounded parse and the checked integer reader, and the file readers that
// go through them (placement, topology, gpt config, safetensors header).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "paco/io/json_read.hpp"
#include "paco/io/safetensors.hpp"
#include "paco/nn/gpt_file.hpp"
#include "paco/place/placement_file.hpp"
#include "paco/place/topology_file.hpp"
#include "paco/testing/files.hpp"

using namespace paco;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// `depth` arrays around an empty one's place: "[[…]]", depth levels.
std::string nested(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}
// A placement file of world8's shape, with `n` as given.
std::string placement_with_n(const std::string& n) {
  return R"({"format": "paco-placement-1", "scenario": "world8", "method": "gcma", "n": )" + n +
         R"(, "d_pp": 4, "d_dp": 2, "pipelines": [[0, 2, 4, 6], [1, 3, 5, 7]],
             "predicted": {"dp_s": 1, "pp_s": 2, "total_s": 5}})";
}
}  // namespace

TEST_CASE("json_int refuses a value that is not an integer, before narrowing", "[io][json]") {
  const auto refused = [](const json& j, errc code, const std::string& shown) {
    auto r = io::json_int<int>(j, "placement.n", 1, 4096);
    INFO(j.dump());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == code);
    CHECK_THAT(r.error().message, Catch::Contains("placement.n") && Catch::Contains("[1, 4096]") &&
                                      Catch::Contains(shown));
  };
  // get<int>() would give 8 for each of the first two.
  refused(json::parse("4294967304"), errc::invalid_argument, "got 4294967304");
  refused(json::parse("8.9"), errc::corrupt, "got 8.9");
  refused(json::parse("8.0"), errc::corrupt, "got 8.0");  // whole, still a float: refused
  refused(json::parse("\"8\""), errc::corrupt, "got \"8\"");
  refused(json::parse("true"), errc::corrupt, "got true");
  refused(json::parse("null"), errc::corrupt, "got null");
  refused(json::parse("[8]"), errc::corrupt, "got an array");
  refused(json::parse("{\"n\": 8}"), errc::corrupt, "got an object");
  refused(json::parse("-4294967288"), errc::invalid_argument, "got -4294967288");
  refused(json::parse("0"), errc::invalid_argument, "got 0");
  refused(json::parse("4097"), errc::invalid_argument, "got 4097");
  // A long string is shown cut.
  auto s = io::json_int<int>(json(std::string(1000, 'x')), "k");
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message.size() < 200);
}

TEST_CASE("json_int accepts exactly [lo, hi]", "[io][json]") {
  CHECK(io::json_int<int>(json::parse("-1"), "k", 0, 10).error().code == errc::invalid_argument);
  CHECK(*io::json_int<int>(json::parse("0"), "k", 0, 10) == 0);
  CHECK(*io::json_int<int>(json::parse("10"), "k", 0, 10) == 10);
  CHECK_FALSE(io::json_int<int>(json::parse("11"), "k", 0, 10).ok());
  CHECK(*io::json_int<int>(json::parse("-5"), "k", -5, -1) == -5);
  CHECK(*io::json_int<int>(json::parse("1"), "placement.n", 1, 4096) == 1);
  CHECK(*io::json_int<int>(json::parse("4096"), "placement.n", 1, 4096) == 4096);
  // The whole of int, and one beyond at each end.
  CHECK(*io::json_int<int>(json::parse("2147483647"), "k") == std::numeric_limits<int>::max());
  CHECK(*io::json_int<int>(json::parse("-2147483648"), "k") == std::numeric_limits<int>::min());
  CHECK_FALSE(io::json_int<int>(json::parse("2147483648"), "k").ok());
  CHECK_FALSE(io::json_int<int>(json::parse("-2147483649"), "k").ok());
  // A small type: narrowing 300 to std::uint8_t would give 44.
  CHECK(*io::json_int<std::uint8_t>(json::parse("255"), "k") == 255);
  CHECK_FALSE(io::json_int<std::uint8_t>(json::parse("300"), "k").ok());
  CHECK_FALSE(io::json_int<std::int8_t>(json::parse("-129"), "k").ok());
}

TEST_CASE("json_int at the ends of int64 and uint64 (signed and unsigned kinds)", "[io][json]") {
  const auto i64max = std::numeric_limits<std::int64_t>::max();
  const auto i64min = std::numeric_limits<std::int64_t>::min();
  const auto u64max = std::numeric_limits<std::uint64_t>::max();
  // nlohmann keeps 9223372036854775807 and 18446744073709551615 as unsigned, negatives as signed.
  const json imax = json::parse("9223372036854775807"), imin = json::parse("-9223372036854775808"),
             umax = json::parse("18446744073709551615"), over = json::parse("9223372036854775808");
  REQUIRE(umax.is_number_unsigned());
  REQUIRE(imin.is_number_integer());
  CHECK(*io::json_int<std::int64_t>(imax, "k") == i64max);
  CHECK(*io::json_int<std::int64_t>(imin, "k") == i64min);
  CHECK(io::json_int<std::int64_t>(over, "k").error().code == errc::invalid_argument);
  CHECK_THAT(io::json_int<std::int64_t>(umax, "k").error().message,
             Catch::Contains("got 18446744073709551615"));
  CHECK(*io::json_int<std::uint64_t>(umax, "k") == u64max);
  CHECK(*io::json_int<std::uint64_t>(imax, "k") == std::uint64_t(i64max));
  CHECK_FALSE(io::json_int<std::uint64_t>(imin, "k").ok());
  CHECK_FALSE(io::json_int<std::uint64_t>(json::parse("-1"), "k").ok());
  CHECK_FALSE(io::json_int<int>(umax, "k").ok());
  CHECK_FALSE(io::json_int<int>(imin, "k").ok());
  CHECK(*io::json_int<long>(imax, "round", 0) == i64max);
  // Beyond uint64 JSON has no integer: nlohmann reads a float, which is refused.
  CHECK(io::json_int<std::uint64_t>(json::parse("18446744073709551616"), "k").error().code ==
        errc::corrupt);
}

TEST_CASE("json_ints names the element that is not one", "[io][json]") {
  CHECK(*io::json_ints<int>(json::parse("[0, 3, 7]"), "pipelines[1]", 0, 7) ==
        std::vector<int>{0, 3, 7});
  CHECK(io::json_ints<int>(json::parse("[]"), "k", 0, 7)->empty());
  CHECK_THAT(io::json_ints<int>(json::parse("[0, 8.5, 1]"), "pipelines[1]", 0, 7).error().message,
             Catch::Contains("pipelines[1][1]") && Catch::Contains("8.5"));
  CHECK_THAT(io::json_ints<int>(json::parse("[0, 4294967297]"), "p", 0, 7).error().message,
             Catch::Contains("p[1]") && Catch::Contains("4294967297"));
  CHECK(io::json_ints<int>(json::parse("{\"a\": 1}"), "p", 0, 7).error().code == errc::corrupt);
}

TEST_CASE("json_parse refuses nesting beyond its bound, 10^6 levels without a crash",
          "[io][json]") {
  // Exactly at the bound: accepted; one more: refused, naming the origin, the bound and where.
  REQUIRE(io::json_parse(nested(io::json_max_depth), "'a.json'").ok());
  auto r = io::json_parse(nested(io::json_max_depth + 1), "'a.json'");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::too_large);
  CHECK_THAT(r.error().message, Catch::Contains("'a.json'") &&
                                    Catch::Contains("nested deeper than 64 levels") &&
                                    Catch::Contains("byte 64"));
  CHECK(io::json_parse("[[1]]", "x", 2).ok());
  CHECK(io::json_parse("[[[1]]]", "x", 2).error().code == errc::too_large);
  // Brackets inside strings (escaped quotes included) are text, not nesting.
  CHECK(io::json_parse(R"(["[[[[\"{{{{", {"a": "]]]["}])", "x", 2).ok());
  // 10^6 levels of arrays, of objects, and inside a field: refused before anything is built.
  const std::size_t D = 1000000;
  CHECK(io::json_parse(nested(D), "deep").error().code == errc::too_large);
  std::string objects;
  for (std::size_t i = 0; i < D; ++i) objects += "{\"a\":";
  objects += "1" + std::string(D, '}');
  CHECK(io::json_parse(objects, "deep").error().code == errc::too_large);
  CHECK(io::json_parse("{\"n\": " + nested(D) + "}", "deep").error().code == errc::too_large);
  // Not JSON: corrupt, with the parser's position.
  auto bad = io::json_parse("{\"n\": 8.9x}", "'b.json'");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == errc::corrupt);
  CHECK_THAT(bad.error().message,
             Catch::Contains("'b.json': not valid JSON") && Catch::Contains("column"));
  // From a stream: the same.
  std::istringstream in("{\"n\": " + nested(100) + "}");
  CHECK(io::json_parse(in, "stream").error().code == errc::too_large);
  std::istringstream ok("{\"n\": 8}");
  CHECK((*io::json_parse(ok, "stream"))["n"] == 8);
}

TEST_CASE("read_placement: n beyond int, a float n and a 10^6-deep value are refused",
          "[io][json][place]") {
  const auto d = testing::fresh_dir("json_placement");
  testing::write_file(d / "good.json", placement_with_n("8"));
  auto good = place::read_placement(d / "good.json", 8, 4, 2);
  REQUIRE(good.ok());
  CHECK(good->n == 8);
  CHECK(good->pipelines[1][3] == 7);

  // 4294967304 = 2^32 + 8: get<int>() gave 8, and the file ran.
  testing::write_file(d / "wide.json", placement_with_n("4294967304"));
  auto wide = place::read_placement(d / "wide.json", 8, 4, 2);
  REQUIRE_FALSE(wide.ok());
  CHECK(wide.error().code == errc::invalid_argument);
  CHECK_THAT(wide.error().message, Catch::Contains("wide.json") && Catch::Contains("placement.n") &&
                                       Catch::Contains("got 4294967304"));

  // 8.9: get<int>() gave 8.
  testing::write_file(d / "float.json", placement_with_n("8.9"));
  auto fl = place::read_placement(d / "float.json", 8, 4, 2);
  REQUIRE_FALSE(fl.ok());
  CHECK(fl.error().code == errc::corrupt);
  CHECK_THAT(fl.error().message, Catch::Contains("float.json") && Catch::Contains("placement.n") &&
                                     Catch::Contains("got 8.9"));
  testing::write_file(d / "string.json", placement_with_n("\"8\""));
  CHECK_FALSE(place::read_placement(d / "string.json", 8, 4, 2).ok());

  // Nested 10^6 deep: SIGSEGV (a recursive copy of the value) before.
  testing::write_file(d / "deep.json", placement_with_n(nested(1000000)));
  auto deep = place::read_placement(d / "deep.json", 8, 4, 2);
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.error().code == errc::too_large);
  CHECK_THAT(deep.error().message,
             Catch::Contains("deep.json") && Catch::Contains("nested deeper than 64 levels"));

  // A device index beyond int (2^32 + 1 would have wrapped to device 1).
  std::string dev = placement_with_n("8");
  dev.replace(dev.find("[0, 2, 4, 6]"), 12, "[4294967297, 2, 4, 6]");
  testing::write_file(d / "device.json", dev);
  CHECK_THAT(place::read_placement(d / "device.json", 8, 4, 2).error().message,
             Catch::Contains("placement.pipelines[0][0]") && Catch::Contains("4294967297"));
  fs::remove_all(d);
}

TEST_CASE("topology, gpt config and safetensors readers check their integers and nesting",
          "[io][json]") {
  // Topology (JSON, and TOML through the same reader).
  const std::string site = R"({"site": [{"name": "a", "devices": D, "latency_ms": 1,
                               "bandwidth_gbps": 1}]})";
  const auto with = [&](const std::string& v) {
    std::string s = site;
    return s.replace(s.find('D'), 1, v);
  };
  REQUIRE(place::parse_topology_json(with("4"), "t.json").ok());
  CHECK_THAT(place::parse_topology_json(with("4294967298"), "t.json").error().message,
             Catch::Contains("devices") && Catch::Contains("4294967298"));
  CHECK_THAT(place::parse_topology_json(with("2.5"), "t.json").error().message,
             Catch::Contains("devices") && Catch::Contains("2.5"));
  const std::string wl = R"({"latency_ms": [[0, 1], [1, 0]], "bandwidth_gbps": [[0, 1], [1, 0]],
                             "workload": {"d_pp": P, "d_dp": 1}})";
  for (const char* v : {"2.5", "4294967298", "\"2\""}) {
    std::string s = wl;
    s.replace(s.find('P'), 1, v);
    CHECK_THAT(place::parse_topology_json(s, "t.json").error().message,
               Catch::Contains("workload.d_pp") && Catch::Contains(v));
  }
  CHECK(place::parse_topology_json("{\"site\": " + nested(1000000) + "}", "t.json").error().code ==
        errc::too_large);
  CHECK(place::parse_topology_toml("x = " + nested(70) + "\n", "t.toml").error().code ==
        errc::too_large);

  // The gpt config of a model file.
  const std::string cfg = nn::gpt_config_json({});
  REQUIRE(nn::gpt_config_from_json(cfg).ok());
  for (const char* v : {"4294967552", "256.5", "\"256\""}) {
    std::string s = cfg;
    s.replace(s.find("256"), 3, v);  // "vocab": 256
    auto r = nn::gpt_config_from_json(s);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("vocab"));
  }
  CHECK(nn::gpt_config_from_json("{\"vocab\": " + nested(1000000) + "}").error().code ==
        errc::too_large);

  // A safetensors header: a dimension that would wrap the element count (2 · 2^63 = 0 mod 2^64),
  // a float dimension, and deep nesting.
  const auto d = testing::fresh_dir("json_safetensors");
  const auto file = [&](std::string header, std::size_t data_bytes = 0) {
    while (header.size() % 8) header += ' ';
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[std::size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
    testing::write_file(d / "t.safetensors", s + header + std::string(data_bytes, '\0'));
    return io::load_safetensors(d / "t.safetensors");
  };
  REQUIRE(file(R"({"a": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]}})").ok());
  REQUIRE(file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8).ok());
  auto wrap = file(
      R"({"a": {"dtype": "F32", "shape": [2, 9223372036854775808], "data_offsets": [0, 0]}})", 8);
  REQUIRE_FALSE(wrap.ok());
  CHECK_THAT(wrap.error().message, Catch::Contains("larger than the file"));
  auto fl = file(R"({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})");
  REQUIRE_FALSE(fl.ok());
  CHECK(fl.error().code == errc::corrupt);
  CHECK_THAT(fl.error().message, Catch::Contains("bad dimension"));
  CHECK_FALSE(file(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0.0, 0]}})").ok());
  auto deep = file("{\"__metadata__\": {\"k\": " + nested(1000000) + "}}");
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.error().code == errc::too_large);
  CHECK_THAT(deep.error().message, Catch::Contains("t.safetensors"));
  fs::remove_all(d);
}
