#pragma once
// byte_tokenizer: text ↔ token ids 0…255, one token per byte (vocabulary 256, nothing unknown).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace paco::io {

struct byte_tokenizer {
  static constexpr int vocab = 256;

  std::vector<std::int32_t> encode(std::string_view s) const {
    std::vector<std::int32_t> ids(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) ids[i] = static_cast<unsigned char>(s[i]);
    return ids;
  }
  // Requires: 0 ≤ id < 256.
  std::string decode(const std::vector<std::int32_t>& ids) const {
    std::string s(ids.size(), '\0');
    for (std::size_t i = 0; i < ids.size(); ++i) s[i] = static_cast<char>(ids[i] & 0xff);
    return s;
  }
};

}  // namespace paco::io
