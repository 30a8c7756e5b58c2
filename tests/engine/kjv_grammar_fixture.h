// kjv-tiny for the constrained-decoding engine tests (structured_engine_test,
// lazy_grammar_engine_test): its tokenizer and the grammar vocabulary made from it, loaded once
// per test suite, and one prompt served to every request of a batch (the spec harness's real
// engine; room for 512 tokens a request in 1024 pages).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/spec_harness.h"
#include "grammar/tokenizer_vocabulary.h"
#include "model/golden_fixtures.h"

namespace spindle::testing {

class KjvGrammarFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::load(model_dir("kjv-tiny")));
    info_ = std::make_shared<const grammar::TokenizerInfo>(grammar::vocabulary_from_tokenizer(*tok_));
  }

  // Every request of `params` with `prompt`; run's max_model_len and num_pages are set here.
  static SpecResult serve_prompt(SpecRun run, const std::vector<TokenId>& prompt,
                                 const std::vector<engine::SamplingParams>& params) {
    run.max_model_len = 512;
    run.num_pages = 1024;
    return serve_speculative(model_dir("kjv-tiny"), run, std::vector<std::vector<TokenId>>(params.size(), prompt),
                             params);
  }

  static inline std::unique_ptr<tokenizer::Tokenizer> tok_;
  static inline std::shared_ptr<const grammar::TokenizerInfo> info_;
};

}  // namespace spindle::testing
