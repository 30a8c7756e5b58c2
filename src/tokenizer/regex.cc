#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/error.h"

namespace spindle::tokenizer {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern), impl_(std::make_unique<Impl>()) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  if (literal) options |= PCRE2_LITERAL;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &error_code, &error_offset, nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    SPINDLE_FAIL("pre-tokenizer regex '{}' does not compile at offset {}: {}", pattern, error_offset,
                 reinterpret_cast<const char*>(message));
  }
  // JIT is an optimisation only: without it (unsupported platform) matching still works.
  (void)pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<TextSpan> Regex::partition(std::string_view text) const {
  std::vector<TextSpan> spans;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match_data(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
  SPINDLE_CHECK(match_data != nullptr, "out of memory creating PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_begin = 0;  // end of the previous match
  size_t start = 0;      // where the next search starts
  while (start <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match_data.get(),
                               nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      SPINDLE_FAIL("pre-tokenizer regex '{}' failed while matching: {}", pattern_,
                   reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.get());
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (begin == end) {
      // Empty match: step over one code point and search again.
      if (begin >= text.size()) break;
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (begin > gap_begin) spans.push_back({gap_begin, begin, false});
    spans.push_back({begin, end, true});
    gap_begin = end;
    start = end;
  }
  if (gap_begin < text.size()) spans.push_back({gap_begin, text.size(), false});
  return spans;
}

}  // namespace spindle::tokenizer
