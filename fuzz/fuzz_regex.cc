// libFuzzer target: bytes -> ECMA-262 regex (first line) and a subject (the rest) -> grammar ->
// matcher. Contract: see grammar_fuzz_common.h.
#include <cstddef>
#include <cstdint>
#include <string>

#include "grammar/simple_grammars.h"
#include "grammar_fuzz_common.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t nl = text.find('\n');
  const std::string pattern = text.substr(0, nl);
  const std::string subject = nl == std::string::npos ? "" : text.substr(nl + 1);
  try {
    spindle::grammar::fuzz::exercise(spindle::grammar::grammar_from_regex(pattern), subject);
  } catch (const spindle::Error&) {
  }
  return 0;
}
