// util/utf8.h: the UTF-8 encoder shared by the tokenizer, Jinja and the grammar.
// Golden bytes: python3's chr(cp).encode('utf-8') (surrogatepass for the lone surrogate), at every
// length boundary of RFC 3629 and a few ordinary code points. Tolerance: none (byte-exact).
#include "util/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace spindle {
namespace {

struct Case {
  char32_t cp;
  std::string bytes;
};

const Case kCases[] = {
    {U'\x41', "\x41"},
    {U'\x7f', "\x7f"},
    {U'\x80', "\xc2\x80"},
    {U'\xe9', "\xc3\xa9"},
    {U'\u07ff', "\xdf\xbf"},
    {U'\u0800', "\xe0\xa0\x80"},
    {U'\u20ac', "\xe2\x82\xac"},
    {U'\ud7ff', "\xed\x9f\xbf"},
    {char32_t{0xdc80}, "\xed\xb2\x80"},
    {U'\uffff', "\xef\xbf\xbf"},
    {U'\U00010000', "\xf0\x90\x80\x80"},
    {U'\U0001f600', "\xf0\x9f\x98\x80"},
    {U'\U0010ffff', "\xf4\x8f\xbf\xbf"},
};

TEST(Utf8Test, EncodesAtEveryLengthBoundary) {
  for (const Case& c : kCases) {
    uint8_t bytes[4] = {};
    const int n = encode_utf8(c.cp, bytes);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n)), c.bytes)
        << "U+" << std::hex << static_cast<uint32_t>(c.cp);
  }
}

TEST(Utf8Test, AppendsAfterWhatIsThere) {
  std::string out = "a";
  for (const Case& c : kCases) append_utf8(out, c.cp);
  std::string expected = "a";
  for (const Case& c : kCases) expected += c.bytes;
  EXPECT_EQ(out, expected);
}

}  // namespace
}  // namespace spindle
