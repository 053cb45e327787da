// libFuzzer target: every decoder of paco/compress (the module codec's framed payloads and the
// config-string parser too) given arbitrary bytes. A decoder must return
// an error or fill its output; it must never read outside the payload (ASan) or hit undefined
// behaviour (UBSan). The first 8 bytes choose the codec, its configuration, level and n.
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "paco/compress/compress.hpp"

namespace pc = paco::compress;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  const std::uint8_t codec = data[0] % 8, a = data[1], b = data[2];
  const std::size_t n = (static_cast<std::size_t>(data[3]) | (std::size_t(data[4]) << 8)) % 5000;
  // The payload ends exactly where its allocation ends, so ASan sees any read past its end;
  // data[7] & 3 shifts its start to check that decoders accept any alignment (UBSan).
  const std::size_t shift = data[7] & 3;
  std::vector<std::byte> storage(shift + size - 8);
  std::byte* start = storage.data() + shift;
  if (size > 8) std::memcpy(start, data + 8, size - 8);
  const paco::slice<const std::byte> in(start, size - 8);
  const std::span<const std::byte> payload(start, size - 8);
  std::vector<float> y(n);
  const paco::slice<float> out(y.data(), y.size());
  switch (codec) {
    case 0: (void)pc::identity{}.decode(in, 32, out); break;
    case 1: {
      pc::cast c({.format = a & 1 ? pc::half_format::fp16 : pc::half_format::bf16});
      (void)c.decode(in, 16, out);
      break;
    }
    case 2: {
      const int bits_of[8] = {2, 3, 4, 5, 6, 7, 8, 9};  // 9: an invalid level must be refused
      pc::quantize q({.bits = 8,
                      .block = 16u * (1u + (b % 20)),
                      .scale = a & 1 ? pc::scale_mode::minmax : pc::scale_mode::absmax});
      (void)q.decode(in, bits_of[(a >> 1) & 7], out);
      break;
    }
    case 3: (void)pc::topk{}.decode(in, (1 + a) / 256.0, out); break;
    case 4: (void)pc::sign_prune{}.decode(in, a / 256.0, out); break;
    case 5: {
      pc::powersgd p;
      pc::powersgd_state st;
      const std::size_t rows = 1 + a % 17, cols = 1 + b % 13;
      if (!p.init(st, {rows, cols}, 1 + data[5] % 3)) break;
      std::vector<float> m(rows * cols);
      (void)p.decode(st, in, 1 + data[6] % 4, paco::slice<float>(m.data(), m.size()));
      break;
    }
    case 6:
      (void)pc::parse_compress_spec(
          std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
      break;
    case 7: {  // a framed module payload: header, level table, bodies
      const char* specs[6] = {"fp32", "bf16", "int8", "lgreco:int", "topk:0.1", "sign_prune:0.5"};
      const std::size_t rows = 1 + b % 9, cols = 1 + data[5] % 11, v = n % 300;
      std::vector<pc::segment> segs;
      if (v) segs.push_back({0, {1, v}});
      segs.push_back({v, {rows, cols}});
      auto c = pc::module_codec::make(*pc::parse_compress_spec(specs[a % 6]), segs);
      if (!c) break;
      std::vector<float> z(c->size());
      (void)c->decode(payload, paco::slice<float>(z.data(), z.size()));
      break;
    }
  }
  return 0;
}
