// Lazily armed grammars in the engine (SamplingParams::grammar_arming), end to end on the CPU with
// the embedded kjv-tiny, sampled at temperature 1 over seeds. kjv-tiny writes no tool-call marker
// and no </think>, so the markers here are text it does write: "," arms a Hermes tool call (the
// grammar of chat/tool_call_grammar.h after the marker, as under tool_choice "auto"; also the
// qwen3_coder, mistral and deepseek_v3 calls), and "." ends
// a "reasoning" section after which a JSON document must follow (as a response_format after
// </think>). Checked against independent truth:
//   - the text before the marker is the model's own (no marker in it) and what follows it is
//     constrained: a finished call parses back with the format's parser and its arguments validate
//     under the tool's schema by python3-jsonschema; a finished document validates likewise; an
//     output cut by max_tokens is a prefix the grammar accepts;
//   - the text before the marker holds none, and where the marker never comes (Hermes's real
//     "<tool_call>", which kjv-tiny never writes, armed as the server arms it) the output equals
//     the unconstrained request's token for token with the same seeds: the unarmed mask takes
//     nothing away but tokens completing a marker with bytes the grammar refuses;
//   - with the section not opened by the prompt and an opening marker the model never writes, the
//     whole output is the document from its first byte.
#include <gtest/gtest.h>

#include "chat/tool_call_grammar.h"
#include "chat/tool_call_parser.h"
#include "engine/kjv_grammar_fixture.h"
#include "grammar/json_schema.h"
#include "grammar/lazy_matcher.h"
#include "grammar/matcher.h"
#include "support/jsonschema_verdicts.h"

namespace spindle {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using testing::SpecResult;

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "amen", "parameters": {"type": "object",
    "properties": {"loud": {"type": "boolean"}}, "required": ["loud"], "additionalProperties": false}}}])");

const char* kSchema = R"({"type": "object", "properties": {"book": {"enum": ["Genesis", "Exodus"]},
  "verse": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["book", "verse"], "additionalProperties": false})";

struct Case {
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::shared_ptr<grammar::LazyArming> arming;
};

std::vector<engine::SamplingParams> seeded(const Case& c, int num_seeds, int max_tokens) {
  std::vector<engine::SamplingParams> params;
  for (int seed = 0; seed < num_seeds; ++seed) {
    engine::SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 1000 + seed;
    p.max_tokens = max_tokens;
    p.grammar = c.grammar;
    p.grammar_arming = c.arming;
    params.push_back(p);
  }
  return params;
}

class LazyGrammarEngineTest : public testing::KjvGrammarFixture {
 protected:
  static void SetUpTestSuite() {
    KjvGrammarFixture::SetUpTestSuite();
    prompt_ = tok_->encode("And God said, Let there be light: and there was light", true);
  }
  static SpecResult serve(const std::vector<engine::SamplingParams>& params) { return serve_prompt({}, prompt_, params); }
  static inline std::vector<TokenId> prompt_;
};

constexpr int kSeeds = 12;

TEST_F(LazyGrammarEngineTest, AToolCallIsConstrainedOnceItsMarkerAppears) {
  // "," then a call of the format: the grammar starts with its trigger string.
  for (const char* name : {"hermes", "qwen3_coder", "mistral", "deepseek_v3"}) {
    SCOPED_TRACE(name);
    const chat::ToolCallFormat& format = chat::find_tool_call_format(name);
    grammar::Grammar g;
    const int32_t calls = g.embed(chat::tool_call_grammar(format, {&kTools, "", /*parallel=*/false}));
    g.set_start(g.choice({{g.literal(","), calls}}, "marked"));
    Case c{grammar::CompiledGrammar::compile(g), std::make_shared<grammar::LazyArming>()};
    c.arming->trigger_strings = {","};
    const SpecResult r = serve(seeded(c, kSeeds, 200));
    std::vector<std::pair<ordered_json, std::string>> jobs;
    int num_calls = 0;
    for (int k = 0; k < kSeeds; ++k) {
      const std::string& text = r.texts[k];
      SCOPED_TRACE("seed " + std::to_string(k) + ": " + text);
      const size_t at = text.find(',');
      ASSERT_NE(at, std::string::npos) << "kjv-tiny wrote no comma in 200 tokens";
      if (r.finish_reasons[k] == engine::FinishReason::kLength) {
        grammar::Matcher m(c.grammar, info_);
        EXPECT_TRUE(m.accept_bytes(text.substr(at))) << "not a prefix of a marked call";
        continue;
      }
      ASSERT_EQ(r.finish_reasons[k], engine::FinishReason::kStop);
      auto parser = chat::make_tool_call_parser(format, &kTools);
      chat::ToolCallDelta d = parser->push(text.substr(at + 1));
      chat::ToolCallDelta end = parser->finish();
      d.calls.insert(d.calls.end(), end.calls.begin(), end.calls.end());
      EXPECT_EQ(d.content + end.content, "");
      ASSERT_EQ(d.calls.size(), 1u);
      const auto& call = d.calls[0];
      ASSERT_TRUE(call.name == "get_weather" || call.name == "amen") << call.name;
      jobs.emplace_back(kTools[call.name == "get_weather" ? 0 : 1]["function"]["parameters"], call.arguments);
      ++num_calls;
    }
    EXPECT_GE(num_calls, kSeeds / 2) << "too few calls finished to validate";
    EXPECT_EQ(testing::jsonschema_verdicts(jobs), std::string(jobs.size(), '1'));
    EXPECT_TRUE(r.integrity_ok);
  }
}

TEST_F(LazyGrammarEngineTest, UntilItsMarkerTheOutputIsTheUnconstrainedOne) {
  const chat::ToolCallFormat& hermes = chat::find_tool_call_format("hermes");
  Case c{grammar::CompiledGrammar::compile(chat::tool_call_grammar(hermes, {&kTools, "", true})),
         std::make_shared<grammar::LazyArming>()};
  c.arming->trigger_strings = chat::tool_call_triggers(hermes);
  ASSERT_EQ(c.arming->trigger_strings, std::vector<std::string>{"<tool_call>"});
  const SpecResult lazy = serve(seeded(c, kSeeds, 64));
  const SpecResult free = serve(seeded(Case{}, kSeeds, 64));
  for (int k = 0; k < kSeeds; ++k) {
    EXPECT_EQ(lazy.tokens[k], free.tokens[k]) << "seed " << k;
    EXPECT_EQ(lazy.finish_reasons[k], free.finish_reasons[k]) << "seed " << k;
    EXPECT_EQ(lazy.texts[k].find("<tool_call>"), std::string::npos);
  }
}

TEST_F(LazyGrammarEngineTest, AResponseFormatIsArmedAfterTheReasoningSection) {
  grammar::JsonGrammarOptions options;
  options.whitespace_pattern = "[ ]?";
  Case c{grammar::CompiledGrammar::compile(grammar::grammar_from_json_schema(kSchema, options)),
         std::make_shared<grammar::LazyArming>()};
  c.arming->section_open = "<think>";  // the prompt opened it: its text runs to the first "."
  c.arming->section_close = ".";
  c.arming->section_opened = true;
  c.arming->at_content = true;
  c.arming->required = true;
  const SpecResult r = serve(seeded(c, kSeeds, 160));
  std::vector<std::pair<ordered_json, std::string>> jobs;
  for (int k = 0; k < kSeeds; ++k) {
    const std::string& text = r.texts[k];
    SCOPED_TRACE("seed " + std::to_string(k) + ": " + text);
    const size_t at = text.find('.');
    if (at == std::string::npos) {  // still reasoning when max_tokens cut it
      EXPECT_EQ(r.finish_reasons[k], engine::FinishReason::kLength);
      continue;
    }
    const std::string content = text.substr(at + 1);
    if (r.finish_reasons[k] == engine::FinishReason::kLength) {
      grammar::Matcher m(c.grammar, info_);
      EXPECT_TRUE(m.accept_bytes(content));
      continue;
    }
    ASSERT_EQ(r.finish_reasons[k], engine::FinishReason::kStop);
    jobs.emplace_back(ordered_json::parse(kSchema), content);
  }
  EXPECT_GE(jobs.size(), static_cast<size_t>(kSeeds / 2)) << "too few documents finished to validate";
  EXPECT_EQ(testing::jsonschema_verdicts(jobs), std::string(jobs.size(), '1'));

  // Not opened by the prompt: the output opens the section (kjv-tiny writes "<think>" when the mask
  // leaves it little else) and the document follows its ".", or it is the document from its first
  // byte.
  c.arming->section_opened = false;
  const SpecResult direct = serve(seeded(c, kSeeds, 160));
  jobs.clear();
  int num_opened = 0, num_direct = 0;
  for (int k = 0; k < kSeeds; ++k) {
    const std::string& text = direct.texts[k];
    SCOPED_TRACE("not opened, seed " + std::to_string(k) + ": " + text);
    if (direct.finish_reasons[k] != engine::FinishReason::kStop) {
      EXPECT_EQ(direct.finish_reasons[k], engine::FinishReason::kLength);
      continue;
    }
    if (text.starts_with("<think>")) {
      ++num_opened;
      const size_t at = text.find('.');
      ASSERT_NE(at, std::string::npos);
      jobs.emplace_back(ordered_json::parse(kSchema), text.substr(at + 1));
    } else {
      ++num_direct;
      jobs.emplace_back(ordered_json::parse(kSchema), text);
    }
  }
  EXPECT_GE(num_direct, 3);
  EXPECT_GE(num_opened + num_direct, kSeeds / 2);
  EXPECT_EQ(testing::jsonschema_verdicts(jobs), std::string(jobs.size(), '1'));
}

}  // namespace
}  // namespace spindle
