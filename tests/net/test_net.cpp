#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "paco/net/crc32c.hpp"
#include "paco/net/inproc.hpp"
#include "paco/net/wire.hpp"
#include "paco/testing/archetypes.hpp"
#include "world.hpp"

using namespace paco;
using namespace paco::net;

// ---- concept: archetype and negative tests ----
namespace {
struct no_deadline {  // send/recv without a deadline: not a Transport
  using request = paco::testing::request_archetype;
  int rank() const { return 0; }
  int size() const { return 1; }
  request send(int, tag_t, std::span<const std::byte>) { return {}; }
  request recv(int, tag_t, std::span<std::byte>) { return {}; }
  void cancel_all() {}
};
struct no_cancel {  // no cancel_all: not a Transport
  using request = paco::testing::request_archetype;
  int rank() const { return 0; }
  int size() const { return 1; }
  request send(int, tag_t, std::span<const std::byte>, deadline) { return {}; }
  request recv(int, tag_t, std::span<std::byte>, deadline) { return {}; }
};
struct bool_wait {  // wait() without an error code: not a Request
  bool wait() { return true; }
  bool test() { return true; }
  void cancel() {}
};
}  // namespace
static_assert(Transport<paco::testing::transport_archetype>);
static_assert(Transport<inproc>);
static_assert(!Transport<no_deadline>);
static_assert(!Transport<no_cancel>);
static_assert(!Request<bool_wait>);
static_assert(!Transport<int>);

TEST_CASE("crc32c: known answers, hardware equals reference, incremental", "[net][wire]") {
  const char* s = "123456789";
  REQUIRE(crc32c(0, std::as_bytes(std::span(s, 9))) == 0xE3069283u);
  std::vector<std::byte> buf(6 * 4096 * 3 + 77);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = std::byte(i * 131 + (i >> 7));
  for (std::size_t n : {0ul, 1ul, 7ul, 8ul, 255ul, 256ul, 257ul, 271ul, 272ul, 511ul, 1535ul,
                        1536ul, 4095ul, 24575ul, 24576ul, 24577ul, 26113ul, buf.size()}) {
    auto sp = std::span<const std::byte>(buf).first(n);
    REQUIRE(crc32c(0, sp) == crc32c_reference(0, sp));
    std::size_t h = n / 3;
    REQUIRE(crc32c(crc32c(0, sp.first(h)), sp.subspan(h)) == crc32c(0, sp));
  }
}

TEST_CASE("crc32c: every implementation this CPU has equals the reference", "[net][wire]") {
  std::vector<std::byte> buf(70000);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = std::byte((i * 2654435761u) >> 13);
  const std::uint32_t init = 0x9abcdef0u;  // a continued CRC: the state enters every path
  for (std::size_t off : {0ul, 3ul}) {
    for (std::size_t n = 0; n + off <= buf.size(); n += n < 2100 ? 1 : 4099) {
      auto sp = std::span<const std::byte>(buf).subspan(off, n);
      auto p = reinterpret_cast<const unsigned char*>(sp.data());
      const std::uint32_t want = crc32c_reference(init, sp);
#ifdef PACO_CRC32C_X86
      if (detail::crc32c_has_hw()) REQUIRE(~detail::crc32c_raw_hw(~init, p, n) == want);
      if (n >= detail::crc32c_fold_min && detail::crc32c_has_fold())
        REQUIRE(~detail::crc32c_raw_fold(~init, p, n) == want);
#endif
      REQUIRE(crc32c(init, sp) == want);
    }
  }
}

TEST_CASE("wire: a greeting's group, rank and streams are checked", "[net][wire]") {
  auto c = wire::make_hello(1, 2, 5, 0);
  REQUIRE(!wire::check_hello(c, 0, 2, 5));
  REQUIRE(wire::check_hello(c, 0, 3, 5) == errc::mismatch);
  REQUIRE(wire::check_hello(c, 0, 2, 6) == errc::mismatch);
  REQUIRE(wire::check_hello(c, 1, 2, 5) == errc::protocol);
  // Streams per link: an older peer's 0 reads as 1; a different count is another group; a
  // stream index beyond the count is a protocol error.
  REQUIRE(!wire::check_hello(c, 0, 2, 5, 1));
  REQUIRE(wire::check_hello(c, 0, 2, 5, 4) == errc::mismatch);
  auto s4 = wire::make_hello(1, 2, 5, 0, 4);
  s4.stream = 3;
  REQUIRE(!wire::check_hello(s4, 0, 2, 5, 4));
  s4.stream = 4;
  REQUIRE(wire::check_hello(s4, 0, 2, 5, 4) == errc::protocol);
}

TEST_CASE("wire: a header round-trips and each corruption gets its own error", "[net][wire]") {
  std::vector<std::byte> payload(100, std::byte{7});
  auto h = wire::make_header(wire::kind::data, 42, payload);
  wire::frame_header out{};
  wire::limits lim{.max_payload = 1000};
  REQUIRE(!wire::decode_header(wire::bytes_of(h), lim, out));
  REQUIRE(out.tag == 42);
  REQUIRE(out.length == 100);
  REQUIRE(!wire::check_payload(out, payload));
  auto bad = [&](auto mutate) {
    auto x = h;
    mutate(x);
    return wire::check_header(x, lim);
  };
  REQUIRE(bad([](auto& x) { x.magic ^= 1; }) == errc::protocol);
  REQUIRE(bad([](auto& x) { x.version = 2; }) == errc::version);
  REQUIRE(bad([](auto& x) { x.tag ^= 1; }) == errc::corrupt);
  auto big = wire::make_header(wire::kind::data, 1, payload);
  big.length = 5000;
  big.header_crc = crc32c(0, wire::bytes_of(big).first(wire::header_crc_bytes));
  REQUIRE(wire::check_header(big, lim) == errc::too_large);
  auto hb = wire::make_header(wire::kind::heartbeat, 0, payload);  // heartbeat with payload
  REQUIRE(wire::check_header(hb, lim) == errc::protocol);
  payload[3] = std::byte{8};
  REQUIRE(wire::check_payload(out, payload) == errc::corrupt);
  // Truncated stream.
  wire::frame_reader rd(lim);
  auto hbytes = wire::bytes_of(h);
  int frames = 0;
  REQUIRE(!rd.feed(hbytes, [&](auto&, auto) { ++frames; }));
  REQUIRE(rd.finish() == errc::protocol);
}
