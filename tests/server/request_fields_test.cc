// The request-field lists (src/server/request_fields.cc): each field in exactly one list per place;
// every field of the pinned openai client's request interfaces (read from the .d.ts files under
// tests/node/node_modules/openai at test time) in some list; every honoured and no-op field named
// by a test of its effect; every no-op and refused top-level field in the README's API section.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "server/request_fields.h"

namespace spindle::server {
namespace {

namespace fs = std::filesystem;
const fs::path kSourceDir = SPINDLE_SOURCE_DIR;

constexpr std::array<std::pair<FieldScope, const char*>, 9> kScopes = {{{kCompletionBody, "completions"},
                                                                        {kChatBody, "chat"},
                                                                        {kEmbeddingsBody, "embeddings"},
                                                                        {kMessage, "message"},
                                                                        {kContentPart, "content part"},
                                                                        {kStreamOptions, "stream_options"},
                                                                        {kResponsesBody, "responses"},
                                                                        {kResponsesItem, "input item"},
                                                                        {kResponsesPart, "input part"}}};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RequestFieldsTest, EachFieldIsInExactlyOneListPerPlace) {
  for (const auto& [scope, scope_name] : kScopes) {
    std::map<std::string_view, int> rows;
    for (const auto& f : request_fields()) {
      if (f.scopes & scope) ++rows[f.name];
    }
    EXPECT_FALSE(rows.empty()) << scope_name;
    for (const auto& [name, count] : rows) EXPECT_EQ(count, 1) << scope_name << ": '" << name << "' is in " << count << " rows";
  }
  for (const auto& f : request_fields()) {
    SCOPED_TRACE(std::string(f.name));
    EXPECT_NE(f.scopes, 0);
    EXPECT_FALSE(f.note.empty()) << "every field says what it does, why nothing, or why it is refused";
    if (!f.accepted.empty()) {
      EXPECT_NE(f.use, FieldUse::kHonoured) << "an honoured field accepts what the parser accepts";
      EXPECT_TRUE(nlohmann::json::accept(f.accepted)) << f.accepted;
    }
  }
  ASSERT_NE(find_request_field(kChatBody, "functions"), nullptr);
  EXPECT_EQ(find_request_field(kChatBody, "functions")->use, FieldUse::kRefused);
  EXPECT_EQ(find_request_field(kCompletionBody, "tools"), nullptr) << "tools is a chat field";
  EXPECT_EQ(find_request_field(kChatBody, "foo"), nullptr);
}

// The field names declared directly in `export interface NAME ... { ... }` of a TypeScript
// declaration file (comments removed; nested object types skipped by brace depth). Empty when the
// interface is not there.
std::set<std::string> interface_fields(const std::string& dts, const std::string& name) {
  const std::string text = std::regex_replace(dts, std::regex(R"(/\*[\s\S]*?\*/|//[^\n]*)"), "");
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("export interface " + name + R"(\b[^{]*\{)"))) return {};
  std::set<std::string> fields;
  const std::regex field(R"(^\s*([A-Za-z_$][A-Za-z0-9_$]*)\??\s*:)");
  int depth = 1;
  std::string statement;
  for (size_t i = static_cast<size_t>(m.position(0) + m.length(0)); i < text.size() && depth > 0; ++i) {
    const char c = text[i];
    if (depth == 1 && (c == ';' || c == '\n')) {
      std::smatch f;
      if (std::regex_search(statement, f, field)) fields.insert(f[1]);
      statement.clear();
      continue;
    }
    if (c == '{') ++depth;
    if (c == '}') --depth;
    if (depth == 1 && c != '}') statement += c;
  }
  return fields;
}

TEST(RequestFieldsTest, ThePinnedClientsInterfacesAreInTheLists) {
  const fs::path openai = kSourceDir / "tests" / "node" / "node_modules" / "openai";
  if (!fs::exists(openai / "package.json")) {
    GTEST_SKIP() << "the pinned openai client is not installed: npm ci --prefix tests/node (scripts/setup.sh runs it)";
  }
  const std::string completions = read_text(openai / "resources" / "completions.d.ts");
  const std::string chat = read_text(openai / "resources" / "chat" / "completions" / "completions.d.ts");
  const std::string embeddings = read_text(openai / "resources" / "embeddings.d.ts");
  const std::string responses = read_text(openai / "resources" / "responses" / "responses.d.ts");
  struct Interface {
    const std::string* dts;
    std::string name;
    FieldScope scope;
  };
  const std::vector<Interface> interfaces = {
      {&completions, "CompletionCreateParamsBase", kCompletionBody},
      {&completions, "CompletionCreateParamsNonStreaming", kCompletionBody},
      {&completions, "CompletionCreateParamsStreaming", kCompletionBody},
      {&chat, "ChatCompletionCreateParamsBase", kChatBody},
      {&chat, "ChatCompletionCreateParamsNonStreaming", kChatBody},
      {&chat, "ChatCompletionCreateParamsStreaming", kChatBody},
      {&chat, "ChatCompletionStreamOptions", kStreamOptions},
      {&chat, "ChatCompletionDeveloperMessageParam", kMessage},
      {&chat, "ChatCompletionSystemMessageParam", kMessage},
      {&chat, "ChatCompletionUserMessageParam", kMessage},
      {&chat, "ChatCompletionAssistantMessageParam", kMessage},
      {&chat, "ChatCompletionToolMessageParam", kMessage},
      {&chat, "ChatCompletionFunctionMessageParam", kMessage},
      {&chat, "ChatCompletionContentPartText", kContentPart},
      {&embeddings, "EmbeddingCreateParams", kEmbeddingsBody},
      {&responses, "ResponseCreateParamsBase", kResponsesBody},
      {&responses, "ResponseCreateParamsNonStreaming", kResponsesBody},
      {&responses, "ResponseCreateParamsStreaming", kResponsesBody},
      {&responses, "EasyInputMessage", kResponsesItem},
      {&responses, "ResponseOutputMessage", kResponsesItem},
      {&responses, "ResponseFunctionToolCall", kResponsesItem},
      {&responses, "ResponseReasoningItem", kResponsesItem},
      {&responses, "ResponseInputText", kResponsesPart},
      {&responses, "ResponseOutputText", kResponsesPart},
  };
  std::map<std::string, size_t> num_fields;
  for (const auto& i : interfaces) {
    const auto fields = interface_fields(*i.dts, i.name);
    EXPECT_FALSE(fields.empty()) << "interface " << i.name << " was not found or has no fields";
    num_fields[i.name] = fields.size();
    for (const auto& name : fields) {
      EXPECT_NE(find_request_field(i.scope, name), nullptr)
          << i.name << "." << name << " is in no list of src/server/request_fields.cc: honour it, accept it as a "
          << "documented no-op, or refuse it";
    }
  }
  // What openai 4.104.0 declares (issue 44); a newer pin may only add fields.
  EXPECT_GE(num_fields["ChatCompletionCreateParamsBase"], 31u);
  EXPECT_GE(num_fields["CompletionCreateParamsBase"], 18u);
  EXPECT_GE(num_fields["ChatCompletionAssistantMessageParam"], 7u);
  EXPECT_GE(num_fields["EmbeddingCreateParams"], 5u);
  EXPECT_GE(num_fields["ResponseCreateParamsBase"], 20u);
  EXPECT_EQ(interface_fields(chat, "NoSuchInterface").size(), 0u);
}

// Where each honoured or no-op field's effect (or its lack of one) is tested: "file:test" under
// tests/server, or tests/node for a .mjs file. Keyed "scope:name".
const std::map<std::string, std::string> kEffectTests = {
    {"completions:model", "server_api_test.cc:EveryBadInputGetsItsStatus"},
    {"chat:model", "server_api_test.cc:EveryBadInputGetsItsStatus"},
    {"completions:prompt", "server_api_test.cc:CompletionNonStreaming"},
    {"chat:messages", "server_api_test.cc:GreedyOutputEqualsSpindleGenerate"},
    {"completions:max_tokens", "server_api_test.cc:CompletionNonStreaming"},
    {"chat:max_tokens", "server_api_test.cc:ChatNonStreaming"},
    {"chat:max_completion_tokens", "server_api_test.cc:ChatNonStreaming"},
    {"completions:n", "server_api_test.cc:ChoicesShareThePromptsPages"},
    {"chat:n", "server_fields_test.cc:ChatChoicesStopAndStopTokenIds"},
    {"completions:temperature", "server_fields_test.cc:TemperatureSeedAndTopP"},
    {"chat:temperature", "server_fields_test.cc:TemperatureSeedAndTopP"},
    {"completions:top_p", "server_fields_test.cc:TemperatureSeedAndTopP"},
    {"chat:top_p", "server_fields_test.cc:TemperatureSeedAndTopP"},
    {"completions:seed", "server_fields_test.cc:TemperatureSeedAndTopP"},
    {"chat:seed", "server_fields_test.cc:TemperatureSeedAndTopP"},
    {"completions:top_k", "server_fields_test.cc:TopKAndMinP"},
    {"chat:top_k", "server_fields_test.cc:TopKAndMinP"},
    {"completions:min_p", "server_fields_test.cc:TopKAndMinP"},
    {"chat:min_p", "server_fields_test.cc:TopKAndMinP"},
    {"completions:presence_penalty", "server_fields_test.cc:Penalties"},
    {"chat:presence_penalty", "server_fields_test.cc:Penalties"},
    {"completions:frequency_penalty", "server_fields_test.cc:Penalties"},
    {"chat:frequency_penalty", "server_fields_test.cc:Penalties"},
    {"completions:repetition_penalty", "server_fields_test.cc:Penalties"},
    {"chat:repetition_penalty", "server_fields_test.cc:Penalties"},
    {"completions:logit_bias", "server_api_test.cc:StopStringAndEndOfSequence"},
    {"chat:logit_bias", "server_api_test.cc:StopStringAndEndOfSequence"},
    {"completions:stop", "server_api_test.cc:StopStringAndEndOfSequence"},
    {"chat:stop", "server_fields_test.cc:ChatChoicesStopAndStopTokenIds"},
    {"completions:stream", "server_api_test.cc:CompletionStreaming"},
    {"chat:stream", "server_api_test.cc:ChatStreaming"},
    {"completions:stream_options", "server_api_test.cc:CompletionStreaming"},
    {"chat:stream_options", "server_api_test.cc:ChatStreaming"},
    {"stream_options:include_usage", "server_api_test.cc:CompletionStreaming"},
    {"completions:logprobs", "server_api_test.cc:CompletionNonStreaming"},
    {"chat:logprobs", "server_api_test.cc:ChatNonStreaming"},
    {"chat:top_logprobs", "server_api_test.cc:ChatNonStreaming"},
    {"completions:echo", "server_endpoints_test.cc:EchoLogprobsHoldTheGoldenRow"},
    {"completions:ignore_eos", "server_fields_test.cc:IgnoreEos"},
    {"chat:ignore_eos", "server_fields_test.cc:IgnoreEos"},
    {"completions:stop_token_ids", "server_api_test.cc:HeldBackTextIsDeliveredWhenAStopTokenEnds"},
    {"completions:prompt_logprobs", "server_endpoints_test.cc:VllmPromptLogprobsAndAWarmCache"},
    {"chat:prompt_logprobs", "server_endpoints_test.cc:VllmPromptLogprobsAndAWarmCache"},
    {"embeddings:model", "server_endpoints_test.cc:EmbeddingsAreTheFloat64LastTokenState"},
    {"embeddings:input", "server_endpoints_test.cc:EmbeddingsAreTheFloat64LastTokenState"},
    {"embeddings:encoding_format", "server_endpoints_test.cc:EmbeddingsAreTheFloat64LastTokenState"},
    {"embeddings:dimensions", "server_endpoints_test.cc:EmbeddingsAreTheFloat64LastTokenState"},
    {"embeddings:user", "server_endpoints_test.cc:EmbeddingsAreTheFloat64LastTokenState"},
    {"chat:stop_token_ids", "server_fields_test.cc:ChatChoicesStopAndStopTokenIds"},
    {"completions:speculative", "server_spec_test.cc:SameTextAndTheMetricsUnderTheirNames"},
    {"chat:speculative", "server_spec_test.cc:SameTextAndTheMetricsUnderTheirNames"},
    {"message:role", "server_fields_test.cc:DeveloperRoleAndTextParts"},
    {"message:content", "server_fields_test.cc:DeveloperRoleAndTextParts"},
    {"content part:type", "server_fields_test.cc:DeveloperRoleAndTextParts"},
    {"content part:text", "server_fields_test.cc:DeveloperRoleAndTextParts"},
    {"completions:user", "server_fields_test.cc:NoOpFieldsChangeNothing"},
    {"chat:user", "server_fields_test.cc:NoOpFieldsChangeNothing"},
    {"chat:metadata", "server_fields_test.cc:NoOpFieldsChangeNothing"},
    {"chat:store", "server_fields_test.cc:NoOpFieldsChangeNothing"},
    {"chat:service_tier", "server_fields_test.cc:NoOpFieldsChangeNothing"},
    {"completions:response_format", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:response_format", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:structured_outputs", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:structured_outputs", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:guided_json", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:guided_json", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:guided_regex", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:guided_regex", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:guided_choice", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:guided_choice", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:guided_grammar", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:guided_grammar", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:guided_whitespace_pattern", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:guided_whitespace_pattern", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:regex", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:regex", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:ebnf", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:ebnf", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:json_schema", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:json_schema", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"completions:grammar", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:grammar", "server_structured_test.cc:EveryConstraintFieldConstrains"},
    {"chat:tools", "server_tools_test.cc:ToolsAndToolTurnsReachTheTemplate"},
    {"chat:tool_choice", "server_tools_test.cc:ToolChoiceRequiredAndNamedAreEnforced"},
    {"chat:parallel_tool_calls", "chat_output_test.cc:ParallelToolCallsFalseKeepsTheFirstCall"},
    {"chat:chat_template_kwargs", "server_tools_test.cc:TemplateKwargsReachTheTemplate"},
    {"chat:reasoning_effort", "server_tools_test.cc:TemplateKwargsReachTheTemplate"},
    {"message:name", "server_tools_test.cc:ToolsAndToolTurnsReachTheTemplate"},
    {"message:tool_calls", "server_tools_test.cc:ToolsAndToolTurnsReachTheTemplate"},
    {"message:tool_call_id", "server_tools_test.cc:ToolsAndToolTurnsReachTheTemplate"},
    {"message:reasoning_content", "server_tools_test.cc:ToolsAndToolTurnsReachTheTemplate"},
    {"responses:model", "server_responses_test.cc:TextMatchesChatAndStreams"},
    {"responses:input", "server_responses_test.cc:TextMatchesChatAndStreams"},
    {"responses:instructions", "server_responses_test.cc:TextMatchesChatAndStreams"},
    {"responses:max_output_tokens", "server_responses_test.cc:TextMatchesChatAndStreams"},
    {"responses:stream", "server_responses_test.cc:TextMatchesChatAndStreams"},
    {"responses:ignore_eos", "server_responses_test.cc:TextMatchesChatAndStreams"},
    {"responses:temperature", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"responses:top_p", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"responses:seed", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"responses:top_k", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"responses:min_p", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"responses:presence_penalty", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"responses:frequency_penalty", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"responses:repetition_penalty", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"responses:tools", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"responses:tool_choice", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"responses:parallel_tool_calls", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"responses:user", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"responses:metadata", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"responses:store", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"responses:service_tier", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"responses:truncation", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"input item:type", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"input item:role", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"input item:content", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"input item:call_id", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"input item:name", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"input item:arguments", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"input item:output", "server_responses_test.cc:ToolCallsAndToolHistoryAsChat"},
    {"input item:id", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"input item:status", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"input item:summary", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"input part:type", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"input part:text", "server_responses_test.cc:SamplingFieldsAsChat"},
    {"input part:annotations", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"input part:logprobs", "server_responses_test.cc:NoOpFieldsChangeNothing"},
    {"responses:reasoning", "responses_request_test.cc:FlatFunctionToolsBecomeChatTools"},
    {"responses:chat_template_kwargs", "server_responses_test.cc:ReasoningIsAnItem"},
    {"responses:text", "server_responses_test.cc:TextFormatConstrainsTheOutput"},
};

TEST(RequestFieldsTest, EachHonouredOrNoOpFieldHasATestOfItsEffect) {
  for (const auto& f : request_fields()) {
    if (f.use == FieldUse::kRefused) continue;
    for (const auto& [scope, scope_name] : kScopes) {
      if (!(f.scopes & scope)) continue;
      const std::string key = std::string(scope_name) + ":" + std::string(f.name);
      SCOPED_TRACE(key);
      const auto it = kEffectTests.find(key);
      if (it == kEffectTests.end()) {
        ADD_FAILURE() << key << " (" << field_use_name(f.use) << ") names no test of its effect";
        continue;
      }
      const std::string file = it->second.substr(0, it->second.find(':'));
      const std::string test = it->second.substr(it->second.find(':') + 1);
      const fs::path path = kSourceDir / "tests" / (file.ends_with(".mjs") ? "node" : "server") / file;
      const std::string text = read_text(path);
      ASSERT_FALSE(text.empty()) << path;
      EXPECT_TRUE(std::regex_search(text, std::regex("TEST(_F)?\\(\\w+, " + test + "\\)")))
          << file << " has no test " << test;
      EXPECT_NE(text.find("\"" + std::string(f.name) + "\""), std::string::npos) << file << " never sends it";
    }
  }
  for (const auto& [key, test] : kEffectTests) {
    const std::string scope_name = key.substr(0, key.find(':'));
    const std::string name = key.substr(key.find(':') + 1);
    FieldScope scope{};
    for (const auto& [s, n] : kScopes) {
      if (scope_name == n) scope = s;
    }
    const RequestField* f = find_request_field(scope, name);
    EXPECT_TRUE(f != nullptr && f->use != FieldUse::kRefused) << key << " is not an honoured or no-op field";
  }
}

TEST(RequestFieldsTest, TheReadmeNamesEveryNoOpAndRefusedField) {
  const std::string readme = read_text(kSourceDir / "README.md");
  ASSERT_FALSE(readme.empty());
  for (const auto& f : request_fields()) {
    if (f.use == FieldUse::kHonoured) continue;
    EXPECT_NE(readme.find("`" + std::string(f.name)), std::string::npos)
        << "README.md does not name the " << field_use_name(f.use) << " field '" << f.name << "'";
  }
}

}  // namespace
}  // namespace spindle::server
