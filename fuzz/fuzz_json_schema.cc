// libFuzzer target: bytes -> JSON Schema -> grammar -> matcher driven by a fixed document.
// Contract: a bad schema throws spindle::Error (naming a JSON pointer); compilation stays within
// the limits; masks agree with the matcher. See grammar_fuzz_common.h.
#include <cstddef>
#include <cstdint>
#include <string>

#include "grammar/json_schema.h"
#include "grammar_fuzz_common.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    spindle::grammar::JsonGrammarOptions o;
    o.max_productions = 50'000;
    o.max_seconds = 1.0;
    const auto g = spindle::grammar::grammar_from_json_schema(text, o);
    spindle::grammar::fuzz::exercise(g, R"({"a": [1, "x", {"b": null}], "c": true})");
  } catch (const spindle::Error&) {
  }
  return 0;
}
