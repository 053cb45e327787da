// libFuzzer target: the frame decoder (wire::frame_reader, check_header, check_payload) and the
// handshake checks (check_hello, verify_server, verify_client) on arbitrary bytes. Built with
// clang++ -fsanitize=fuzzer,address,undefined. Every input must end in success or one of the
// documented errors, never a crash, and the reader never holds more than limits.max_payload.
//
// The first byte picks a mode so that mutations reach past the header checksum:
//   0: the input is a raw byte stream, fed in pieces whose sizes come from the input;
//   1: the input is a header whose CRC is recomputed, followed by its payload;
//   2: the input holds two hello bodies and an auth body put through the handshake checks;
//   3: the input is a store push (store::wire::request, then its fp32 Δ) applied to a
//      module_store: a push with a NaN, zero, negative or huge weight, a round or module out of
//      range, a wrong count or a non-finite Δ is refused (invalid_argument or mismatch), and one
//      that is taken leaves θ finite after the round closes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <cmath>
#include <vector>

#include "paco/net/detail/handshake_mac.hpp"
#include "paco/net/wire.hpp"
#include "paco/outer/outer.hpp"
#include "paco/store/module_store.hpp"
#include "paco/store/wire.hpp"

using namespace paco;
using namespace paco::net;

static void require_known(std::error_code ec) {
  if (!ec) return;
  if (ec.category() != paco_category()) std::abort();
  switch (static_cast<errc>(ec.value())) {
    case errc::protocol:
    case errc::version:
    case errc::corrupt:
    case errc::too_large:
    case errc::auth:
    case errc::mismatch: return;
    default: std::abort();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const wire::limits lim{.max_payload = 1 << 16};
  std::uint8_t mode = data[0] % 4;
  auto in = std::span(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  if (mode == 0) {
    wire::frame_reader rd(lim);
    std::size_t frames = 0, i = 0;
    std::error_code ec;
    while (i < in.size() && !ec) {
      std::size_t k = 1 + static_cast<std::size_t>(in[i]) % 61;
      k = std::min(k, in.size() - i);
      ec =
          rd.feed(in.subspan(i, k), [&](const wire::frame_header& h, std::span<const std::byte> p) {
            if (p.size() != h.length || h.length > lim.max_payload) std::abort();
            ++frames;
          });
      i += k;
    }
    require_known(ec);
    require_known(rd.finish());
  } else if (mode == 1) {
    if (in.size() < wire::header_bytes) return 0;
    wire::frame_header h;
    std::memcpy(&h, in.data(), sizeof h);
    h.header_crc = crc32c(0, wire::bytes_of(h).first(wire::header_crc_bytes));
    std::vector<std::byte> stream(wire::bytes_of(h).begin(), wire::bytes_of(h).end());
    stream.insert(stream.end(), in.begin() + wire::header_bytes, in.end());
    wire::frame_header out;
    auto ec = wire::decode_header(stream, lim, out);
    require_known(ec);
    if (!ec)
      require_known(wire::check_payload(
          out, std::span(stream).subspan(
                   wire::header_bytes,
                   std::min<std::size_t>(out.length, stream.size() - wire::header_bytes))));
    wire::frame_reader rd(lim);
    require_known(rd.feed(stream, [](auto&, auto) {}));
    require_known(rd.finish());
  } else if (mode == 3) {
    store::wire::request rq{};
    std::vector<std::byte> head(sizeof rq);
    std::memcpy(head.data(), in.data(), std::min(sizeof rq, in.size()));
    std::memcpy(&rq, head.data(), sizeof rq);
    const auto rest = in.size() > sizeof rq ? in.subspan(sizeof rq) : in.subspan(0, 0);
    std::vector<float> delta(std::min<std::size_t>(rq.count, rest.size() / sizeof(float)));
    if (!delta.empty()) std::memcpy(delta.data(), rest.data(), delta.size() * sizeof(float));
    store::module_store<outer::sgd> st({{0, 8, 2}, {1, 3, 1}}, outer::sgd{.lr = 1.0f});
    auto s = st.push(rq.module, rq.worker, rq.round, delta, rq.weight);
    if (!s.ok()) {
      if (s.error().code != errc::invalid_argument && s.error().code != errc::mismatch)
        std::abort();
      return 0;
    }
    const bool weight_ok =
        std::isfinite(rq.weight) && rq.weight > 0 && rq.weight <= store::max_push_weight;
    if (!weight_ok || rq.round != 0 || rq.module < 0 || rq.module > 1) std::abort();
    if (delta.size() != st.info(rq.module).size) std::abort();
    for (float v : delta)
      if (!std::isfinite(v)) std::abort();
    st.close(rq.module);
    std::vector<float> theta(st.info(rq.module).size);
    st.pull(rq.module, theta);
    for (float v : theta)
      if (!std::isfinite(v)) std::abort();
  } else {
    wire::hello_body c{}, s{};
    wire::auth_body a{};
    std::size_t need = sizeof c + sizeof s + sizeof a;
    std::vector<std::byte> buf(need);
    std::memcpy(buf.data(), in.data(), std::min(need, in.size()));
    std::memcpy(&c, buf.data(), sizeof c);
    std::memcpy(&s, buf.data() + sizeof c, sizeof s);
    std::memcpy(&a, buf.data() + sizeof c + sizeof s, sizeof a);
    require_known(wire::check_hello(c, 0, 4, 7));
    require_known(wire::check_hello(s, 1, static_cast<int>(s.size % 64), s.epoch));
    // A random mac must not authenticate: only a holder of the token can make it.
    if (!wire::verify_server("fuzz-token", c, s)) std::abort();
    if (!wire::verify_client("fuzz-token", c, s, a)) std::abort();
    // The real macs do.
    auto ms = wire::server_mac("fuzz-token", c, s);
    std::memcpy(s.mac, ms.data(), 32);
    if (wire::verify_server("fuzz-token", c, s)) std::abort();
    if (!wire::verify_server("other-token", c, s)) std::abort();
  }
  return 0;
}
