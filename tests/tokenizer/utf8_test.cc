#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <string>

#include "util/error.h"

namespace spindle::tokenizer {
namespace {

TEST(Utf8Test, FindsFirstInvalidByte) {
  EXPECT_EQ(find_invalid_utf8(""), kValidUtf8);
  EXPECT_EQ(find_invalid_utf8("héllo 😀 中"), kValidUtf8);
  EXPECT_EQ(find_invalid_utf8("ab\xFF"), 2u);
  EXPECT_EQ(find_invalid_utf8("a\xC3"), 1u);            // truncated
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);         // overlong
  EXPECT_EQ(find_invalid_utf8("xx\xED\xA0\x80"), 2u);   // surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u); // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("ok\x80"), 2u);           // stray continuation
}

TEST(Utf8Test, CheckNamesTheByte) {
  try {
    check_utf8("abc\xFE");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "prompt is not valid UTF-8 at byte 3");
  }
}

TEST(Utf8Test, CodePointsRoundTrip) {
  for (const char32_t cp : {U'a', U'\u00e9', U'\u4e2d', U'\U0001F600', U'\u0100', U'\U0010FFFF'}) {
    std::string s;
    append_utf8(s, cp);
    EXPECT_EQ(find_invalid_utf8(s), kValidUtf8);
    size_t pos = 0;
    EXPECT_EQ(next_code_point(s, pos), cp);
    EXPECT_EQ(pos, s.size());
  }
}

TEST(Utf8Test, AssemblerHoldsIncompleteSequences) {
  const std::string emoji = "\xF0\x9F\x98\x80";
  Utf8Assembler assembler;
  std::string out;
  for (const char c : emoji) {
    EXPECT_TRUE(out.empty());
    assembler.push(std::string_view(&c, 1), out);
  }
  EXPECT_EQ(out, emoji);
  EXPECT_FALSE(assembler.has_pending());
}

TEST(Utf8Test, AssemblerReplacesInvalidBytes) {
  EXPECT_EQ(to_valid_utf8("a\xFF" "b"), "a\uFFFD" "b");
  EXPECT_EQ(to_valid_utf8("a\xE4\xB8"), "a\uFFFD");  // truncated at the end: one U+FFFD
  EXPECT_EQ(to_valid_utf8("\xE4\xB8x"), "\uFFFDx");  // maximal subpart
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), "\uFFFD\uFFFD");
}

}  // namespace
}  // namespace spindle::tokenizer
