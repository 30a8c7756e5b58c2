// libFuzzer target: bytes -> GBNF grammar -> matcher driven by a fixed text.
// Contract: see grammar_fuzz_common.h.
#include <cstddef>
#include <cstdint>
#include <string>

#include "grammar/gbnf.h"
#include "grammar_fuzz_common.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    spindle::grammar::fuzz::exercise(spindle::grammar::grammar_from_gbnf(text, 50'000), "1. e4 e5\nabc(1+2)*3 {\"x\": 1}");
  } catch (const spindle::Error&) {
  }
  return 0;
}
