#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace spindle::tokenizer {
namespace {

constexpr char32_t kMaxMapped = 0x100 + 68;

struct ByteTables {
  std::array<char32_t, 256> to_code_point{};
  std::array<std::string, 256> to_utf8;
  std::array<int, kMaxMapped> to_byte{};  // -1: not a mapped code point

  ByteTables() {
    to_byte.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
      to_code_point[b] = cp;
      append_utf8(to_utf8[b], cp);
      to_byte[cp] = b;
    }
  }
};

const ByteTables& tables() {
  static const ByteTables kTables;
  return kTables;
}

}  // namespace

char32_t byte_to_code_point(unsigned char b) { return tables().to_code_point[b]; }

void byte_level_encode(std::string_view bytes, std::string& out) {
  const ByteTables& t = tables();
  for (const char c : bytes) out.append(t.to_utf8[static_cast<unsigned char>(c)]);
}

void byte_level_decode(std::string_view token, std::string& out) {
  const ByteTables& t = tables();
  size_t pos = 0;
  while (pos < token.size()) {
    const size_t start = pos;
    const char32_t cp = next_code_point(token, pos);
    if (cp < kMaxMapped && t.to_byte[cp] >= 0) {
      out.push_back(static_cast<char>(t.to_byte[cp]));
    } else {
      out.append(token.substr(start, pos - start));
    }
  }
}

}  // namespace spindle::tokenizer
