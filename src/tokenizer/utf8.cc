#include "tokenizer/utf8.h"

#include "util/error.h"

namespace spindle::tokenizer {
namespace {

// How a lead byte constrains its sequence: total length and the range allowed for the
// second byte (later bytes are always 80..BF). length 0 means "never a lead byte".
struct LeadInfo {
  int length;
  unsigned char lo;
  unsigned char hi;
};

LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

enum class SeqStatus { kComplete, kInvalid, kTruncated };

// Examines the sequence at text[pos]. kComplete: `len` bytes form a code point. kInvalid:
// the first `len` bytes (>= 1) are a maximal ill-formed subpart. kTruncated: the text ends
// after `len` bytes that are a valid prefix.
SeqStatus examine(std::string_view text, size_t pos, size_t& len) {
  const auto b = static_cast<unsigned char>(text[pos]);
  const LeadInfo info = lead_info(b);
  if (info.length == 0) {
    len = 1;
    return SeqStatus::kInvalid;
  }
  for (int k = 1; k < info.length; ++k) {
    if (pos + k >= text.size()) {
      len = k;
      return SeqStatus::kTruncated;
    }
    const auto c = static_cast<unsigned char>(text[pos + k]);
    const unsigned char lo = k == 1 ? info.lo : 0x80;
    const unsigned char hi = k == 1 ? info.hi : 0xBF;
    if (c < lo || c > hi) {
      len = k;
      return SeqStatus::kInvalid;
    }
  }
  len = info.length;
  return SeqStatus::kComplete;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t len = 0;
    if (examine(text, pos, len) != SeqStatus::kComplete) return pos;
    pos += len;
  }
  return kValidUtf8;
}

void check_utf8(std::string_view text, std::string_view what) {
  const size_t bad = find_invalid_utf8(text);
  SPINDLE_CHECK(bad == kValidUtf8, "{} is not valid UTF-8 at byte {}", what, bad);
}

char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) {
    ++pos;
    return b;
  }
  const int len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x7F >> len);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  pos += len;
  return cp;
}

void Utf8Assembler::push(std::string_view bytes, std::string& out) {
  pending_.append(bytes);
  drain(out, /*final=*/false);
}

void Utf8Assembler::finish(std::string& out) { drain(out, /*final=*/true); }

void Utf8Assembler::drain(std::string& out, bool final) {
  const std::string_view text = pending_;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto b = static_cast<unsigned char>(text[pos]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++pos;
      continue;
    }
    size_t len = 0;
    const SeqStatus status = examine(text, pos, len);
    if (status == SeqStatus::kTruncated && !final) break;
    if (status == SeqStatus::kComplete) {
      out.append(text.substr(pos, len));
    } else {
      out.append(kReplacement);
    }
    pos += len;
  }
  pending_.erase(0, pos);
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  Utf8Assembler assembler;
  assembler.push(bytes, out);
  assembler.finish(out);
  return out;
}

}  // namespace spindle::tokenizer
