// libFuzzer target: tokenizer.json bytes -> Tokenizer::from_files, then encode and decode a few
// texts (ASCII, multi-byte UTF-8, added-token lookalikes) and stream the ids through the
// incremental detokenizer.
// Contract under test: a bad file throws spindle::Error naming it; a file that loads encodes any
// valid UTF-8 into ids inside its vocabulary, and decode() equals the incremental detokenizer's
// concatenated output. Any other exception, or a crash, is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  spindle::tokenizer::TokenizerFiles files;
  files.tokenizer_json.assign(reinterpret_cast<const char*>(data), size);
  try {
    const auto tok = spindle::tokenizer::Tokenizer::from_files(files, "fuzz/tokenizer.json");
    for (const char* text : {"And God said, Let there be light.", "  a\tb\n\nc ", "\xc3\xa9t\xc3\xa9 \xe2\x96\x81x \xf0\x9f\x99\x82",
                             "<s></s><|endoftext|><unk>", ""}) {
      for (const bool special : {false, true}) {
        const auto ids = tok.encode(text, special);
        for (auto id : ids) {
          if (id < 0 || id >= tok.vocab_size()) std::abort();
        }
        for (const bool skip : {false, true}) {
          const std::string whole = tok.decode(ids, skip);
          spindle::tokenizer::IncrementalDetokenizer detok(tok, skip);
          std::string streamed;
          for (auto id : ids) detok.push(id, streamed);
          detok.finish(streamed);
          if (streamed != whole) std::abort();
        }
      }
    }
  } catch (const spindle::Error&) {
    // Rejected file: expected.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
