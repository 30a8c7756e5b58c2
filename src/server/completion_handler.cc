#include "server/completion_handler.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <ctime>

#include "chat/tool_call_grammar.h"
#include "engine/dp_group.h"
#include "grammar/grammar.h"
#include "grammar/lazy_matcher.h"
#include "server/chat_request.h"
#include "server/prompt_logprobs.h"
#include "tokenizer/chat_template.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}-{:x}{:06x}", prefix, static_cast<uint64_t>(std::time(nullptr)), counter++);
}

// The token's own bytes (a byte-level token may hold part of a UTF-8 sequence), for "bytes".
std::vector<uint8_t> token_bytes(const tokenizer::Tokenizer& tok, TokenId token) {
  std::string raw;
  tok.append_token_bytes(token, /*skip_special_tokens=*/false, raw);
  return std::vector<uint8_t>(raw.begin(), raw.end());
}

json empty_completion_logprobs() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

json finish_reason_json(bool finished, engine::FinishReason reason) {
  if (!finished) return nullptr;
  return std::string(engine::finish_reason_name(reason));
}

bool forces_tool_calls(const ChatContext& c) {
  return c.tool_choice == ToolChoice::kRequired || c.tool_choice == ToolChoice::kNamed;
}

// The grammar of the tool calls (chat/tool_call_grammar.h): the calls tool_choice forces, or under
// "auto" the calls armed at the format's marker (the generic format: its answer object, a
// response allowed), compiled on the calling (HTTP work pool) thread; a tool schema that does not
// convert is a 400 naming it.
std::shared_ptr<const grammar::CompiledGrammar> compile_tool_call_grammar(const ChatContext& c,
                                                                          const chat::ToolCallFormat& format) {
  const bool named = c.tool_choice == ToolChoice::kNamed;
  chat::ForcedToolCalls forced{&c.tools, named ? c.tool_choice_name : "", c.parallel_tool_calls && !named};
  forced.allow_response = c.tool_choice == ToolChoice::kAuto;
  try {
    return grammar::CompiledGrammar::compile(chat::tool_call_grammar(format, forced));
  } catch (const Error& e) {
    const std::string what = e.message();
    const size_t colon = what.find(": ");
    // "tools[k].function.parameters: <reason>" names the tool's schema; anything else tool_choice.
    if (what.starts_with("tools[") && colon != std::string::npos) bad_request(what.substr(0, colon), what);
    bad_request("tool_choice", what);
  }
}

// When a chat request's grammar arms (grammar/lazy_matcher.h): after the model's reasoning section
// (required: the constrained part must come), and under tool_choice "auto" at the format's call
// marker instead. Null: from the first token.
std::shared_ptr<const grammar::LazyArming> grammar_arming(const OutputParsing& p, bool auto_tool_calls) {
  auto a = std::make_shared<grammar::LazyArming>();
  if (p.reasoning) {
    a->section_open = p.reasoning->start;
    a->section_close = p.reasoning->end;
    a->section_opened = p.reasoning_opened;
  }
  if (auto_tool_calls) a->trigger_strings = chat::tool_call_triggers(*p.tool_calls);
  if (a->trigger_strings.empty()) {
    if (!p.reasoning) return nullptr;
    a->at_content = true;
    a->required = true;
  }
  return a;
}

// The grammar (and its arming) of a request: its output constraint (after any reasoning; a JSON
// document may then follow whitespace), the tool calls tool_choice forces, or under "auto" the
// calls armed at their marker.
void choose_grammar(GenerationRequest& r, const OutputParsing& parsing) {
  const bool forced = r.chat && forces_tool_calls(r.chat_context);
  if (forced && r.constraint.kind != OutputConstraint::Kind::kNone) {
    bad_request("tool_choice", fmt::format("'tool_choice' \"required\" or a named function constrains the output "
                                           "to tool calls and cannot be combined with '{}'", r.constraint.param));
  }
  if (r.constraint.kind != OutputConstraint::Kind::kNone) {
    r.constraint.leading_space = parsing.reasoning != nullptr;
    r.sampling.grammar = compile_output_constraint(r.constraint);
    if (r.chat) r.sampling.grammar_arming = grammar_arming(parsing, false);
    return;
  }
  if (parsing.tool_calls == nullptr) return;
  r.sampling.grammar = compile_tool_call_grammar(r.chat_context, *parsing.tool_calls);
  r.sampling.grammar_arming = grammar_arming(parsing, !forced);
}

// How the choices' text is read: the template's reasoning format (whether the prompt opened the
// section), its tool-call format when tools are given and tool_choice is not "none".
OutputParsing output_parsing(const tokenizer::ChatTemplate& t, GenerationRequest& r, const std::string& prompt) {
  OutputParsing p;
  if (!t.reasoning_parser().empty()) {
    p.reasoning = &chat::find_reasoning_format(t.reasoning_parser());
    p.reasoning_opened = chat::prompt_opens_reasoning(*p.reasoning, prompt);
  }
  const ChatContext& c = r.chat_context;
  if (!c.has_tools() || c.tool_choice == ToolChoice::kNone) return p;
  if (t.tool_call_parser().empty()) {
    bad_request("tools", "this server reads no tool calls (--tool-call-parser none); start it with --tool-call-parser "
                         "NAME (hermes, qwen3_coder, llama3_json, mistral, deepseek_v3, generic) or auto");
  }
  p.tool_calls = &chat::find_tool_call_format(t.tool_call_parser());
  p.parallel_tool_calls = c.parallel_tool_calls;
  p.tools = std::make_shared<const nlohmann::ordered_json>(c.tools);
  if (p.tool_calls->keeps_special_tokens) r.sampling.skip_special_tokens = false;
  return p;
}

}  // namespace

std::string logprob_token_text(const tokenizer::Tokenizer& tokenizer, TokenId token) {
  std::string raw;
  tokenizer.append_token_bytes(token, /*skip_special_tokens=*/false, raw);
  return raw;
}

Submitted submit_request(engine::DpGroup& engine, GenerationRequest& r) {
  if (std::string reason = engine.unhealthy_reason(); !reason.empty()) {
    throw ApiError(503, "server_unhealthy", "", "the server is unhealthy and must be restarted: " + reason);
  }
  if (!r.model.empty() && r.model != engine.model_name()) {
    throw ApiError(404, "invalid_request_error", "model",
                   fmt::format("the model '{}' does not exist; this server serves '{}'", r.model, engine.model_name()));
  }
  Submitted s;
  std::vector<TokenId> ids;
  const auto& tok = engine.tokenizer();
  try {
    if (r.chat) {
      if (engine.chat_template() == nullptr) bad_request("messages", "this model has no chat template");
      s.prompt_text = render_chat(*engine.chat_template(), r, /*add_generation_prompt=*/true);
      s.parsing = output_parsing(*engine.chat_template(), r, s.prompt_text);
      ids = tok.encode(s.prompt_text, /*add_special_tokens=*/false);
    } else if (!r.prompt_token_ids.empty()) {
      ids = r.prompt_token_ids;
      for (int t : ids) {
        if (t < 0 || t >= engine.vocab_size()) bad_request("prompt", fmt::format("token id {} is outside the vocabulary", t));
      }
      s.prompt_text = tok.decode(ids, false);
    } else {
      s.prompt_text = r.prompt;
      ids = tok.encode(r.prompt, /*add_special_tokens=*/true);
    }
  } catch (const Error& e) {
    bad_request(r.chat ? "messages" : "prompt", e.message());
  }
  if (ids.empty()) bad_request(r.chat ? "messages" : "prompt", "the prompt is empty");
  for (int t : ids) {
    // A tokenizer may know added tokens beyond the model's embedding rows.
    if (t >= engine.vocab_size()) {
      bad_request(r.chat ? "messages" : "prompt",
                  fmt::format("the prompt holds token {} ('{}'), which this model's embedding does not have", t,
                              tok.id_to_token(t)));
    }
  }
  const int max_len = engine.max_model_len();
  const int n = static_cast<int>(ids.size());
  if (n >= max_len) {
    bad_request(r.chat ? "messages" : "prompt",
                fmt::format("the prompt has {} tokens; this model's context is {} tokens", n, max_len));
  }
  if (r.sampling.max_tokens < 0) r.sampling.max_tokens = max_len - n;  // chat default: fill the context
  if (n + r.sampling.max_tokens > max_len) {
    bad_request(r.chat ? "max_completion_tokens" : "max_tokens",
                fmt::format("the prompt ({} tokens) plus max_tokens ({}) exceed this model's context of {} tokens", n,
                            r.sampling.max_tokens, max_len));
  }
  try {
    engine::validate_sampling_params(r.sampling, engine.vocab_size());
  } catch (const Error& e) {
    bad_request("", e.message());
  }
  // Compiled here, on the HTTP work pool, before anything is queued (an output constraint's is
  // cached by canonical text).
  choose_grammar(r, s.parsing);
  if (r.sampling.prompt_logprobs >= 0) s.prompt_ids = ids;
  s.num_prompt_tokens = n;
  std::vector<engine::SamplingParams> choices;
  for (int i = 0; i < r.n; ++i) {
    engine::SamplingParams& params = choices.emplace_back(r.sampling);
    if (params.seed) *params.seed += static_cast<uint64_t>(i);  // distinct, reproducible choices
  }
  try {
    // One rank, all or none, together: the choices share the prompt's KV pages.
    s.streams = engine.submit_choices(std::move(ids), std::move(choices));
  } catch (const engine::EngineOverloaded& e) {
    throw ApiError(503, "server_overloaded", "", e.what());
  }
  return s;
}

CompletionRelay::Choice::Choice(const tokenizer::Tokenizer& tokenizer, const OutputParsing& parsing)
    : fields(parsing),
      completion_lp(empty_completion_logprobs()),
      chat_lp(json::array()),
      offsets(tokenizer, /*skip_special_tokens=*/true) {}  // as the engine detokenizes

CompletionRelay::CompletionRelay(engine::DpGroup& engine, std::shared_ptr<const GenerationRequest> request,
                                 Submitted submitted)
    : Relay(std::move(submitted.streams)),
      engine_(engine),
      request_(std::move(request)),
      submitted_(std::move(submitted)),
      id_(new_id(request_->chat ? "chatcmpl" : "cmpl")),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  SPINDLE_CHECK(!streams().empty(), "a relay needs at least one submitted choice");
  choices_.reserve(streams().size());
  for (size_t i = 0; i < streams().size(); ++i) {
    Choice& c = choices_.emplace_back(engine_.tokenizer(), submitted_.parsing);
    if (!request_->chat && request_->echo) {
      c.text_offset = submitted_.prompt_text.size();
      if (!request_->stream) c.text = submitted_.prompt_text;
    }
  }
}

void CompletionRelay::append_logprobs(Choice& c, const engine::RequestOutput& out, json& completion_lp,
                                      json& chat_lp) {
  const auto& tok = engine_.tokenizer();
  for (const auto& s : out.logprobs) {
    const std::string text = logprob_token_text(tok, s.token);
    if (request_->chat) {
      json top = json::array();
      for (const auto& t : s.top) {
        top.push_back({{"token", logprob_token_text(tok, t.token)}, {"logprob", t.logprob}, {"bytes", token_bytes(tok, t.token)}});
      }
      chat_lp.push_back({{"token", text}, {"logprob", s.logprob}, {"bytes", token_bytes(tok, s.token)}, {"top_logprobs", top}});
    } else {
      json top = json::object();
      for (const auto& t : s.top) top[logprob_token_text(tok, t.token)] = t.logprob;
      completion_lp["tokens"].push_back(text);
      completion_lp["token_logprobs"].push_back(s.logprob);
      completion_lp["top_logprobs"].push_back(top);
      completion_lp["text_offset"].push_back(c.text_offset);
    }
    // The offset of the next token: the bytes this one adds to the choice's decoded text.
    c.text_offset += c.offsets.push(s.token).size();
  }
}

void CompletionRelay::take_prompt_logprobs(Choice& c, const engine::RequestOutput& out, json& completion_lp) {
  if (c.prompt_seen || out.tokens.empty()) return;
  c.prompt_seen = true;
  const GenerationRequest& r = *request_;
  if (r.sampling.prompt_logprobs < 0) return;
  const auto& tok = engine_.tokenizer();
  if (!r.chat && r.echo && r.sampling.logprobs) {
    append_echo_logprobs(tok, submitted_.prompt_ids, out.prompt_logprobs, r.sampling.top_logprobs, completion_lp);
  }
  if (r.vllm_prompt_logprobs) c.vllm_prompt_lp = vllm_prompt_logprobs(tok, submitted_.prompt_ids, out.prompt_logprobs, r.sampling.prompt_logprobs);
}

std::string CompletionRelay::echo_event(size_t index, Choice& c, const engine::RequestOutput& out) {
  json lp = empty_completion_logprobs();
  take_prompt_logprobs(c, out, lp);
  return event(chunk(json::array(
      {{{"index", index}, {"text", submitted_.prompt_text}, {"logprobs", std::move(lp)}, {"finish_reason", nullptr}}})));
}

json CompletionRelay::chunk(json choices) const {
  return {{"id", id_},
          {"object", request_->chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", engine_.model_name()},
          {"choices", std::move(choices)}};
}

std::string CompletionRelay::event(const json& j) const { return "data: " + to_json_text(j) + "\n\n"; }

json CompletionRelay::usage() const {
  int completion_tokens = 0, accepted_draft_tokens = 0;
  int cached_prompt_tokens = submitted_.num_prompt_tokens;
  for (const auto& c : choices_) {
    completion_tokens += c.num_output_tokens;
    accepted_draft_tokens += c.num_accepted_draft_tokens;
    cached_prompt_tokens = std::min(cached_prompt_tokens, c.num_cached_prompt_tokens);
  }
  return usage_json({submitted_.num_prompt_tokens, completion_tokens, accepted_draft_tokens, cached_prompt_tokens});
}

std::string CompletionRelay::take_events() {
  if (done_) return "";
  std::string out;
  const GenerationRequest& r = *request_;
  if (!started_) {
    started_ = true;
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (r.chat) {
        out += event(chunk(json::array({{{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr}, {"finish_reason", nullptr}}})));
      } else if (r.echo && !r.sampling.logprobs) {  // with logprobs: at the first token (echo_event)
        out += event(chunk(json::array(
            {{{"index", i}, {"text", submitted_.prompt_text}, {"logprobs", nullptr}, {"finish_reason", nullptr}}})));
      }
    }
  }
  bool all_finished = true;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    engine::RequestOutput o;
    while (next_output(i, o)) {
      if (o.finish_reason == engine::FinishReason::kError) {
        out += event(ApiError(500, "internal_error", "", "generation failed: " + o.error).to_json());
        out += "data: [DONE]\n\n";
        set_finished(i);
        cancel();
        done_ = true;
        return out;
      }
      c.num_output_tokens = o.num_output_tokens;
      c.num_accepted_draft_tokens = o.num_accepted_draft_tokens;
      c.num_cached_prompt_tokens = o.num_cached_prompt_tokens;
      if (o.finished) set_finished(i);
      c.finish_reason = o.finish_reason;
      if (!r.chat && r.echo && r.sampling.logprobs && !c.prompt_seen && !o.tokens.empty()) out += echo_event(i, c, o);
      if (o.text.empty() && !o.finished && o.logprobs.empty()) continue;
      json completion_lp = empty_completion_logprobs();
      json chat_lp = json::array();
      append_logprobs(c, o, completion_lp, chat_lp);
      if (r.chat) {
        out += chat_events(i, c, o, std::move(chat_lp));
        continue;
      }
      json choice = {{"index", i}, {"finish_reason", finish_reason_json(o.finished, o.finish_reason)}};
      choice["text"] = o.text;
      choice["logprobs"] = r.sampling.logprobs ? completion_lp : json(nullptr);
      out += event(chunk(json::array({std::move(choice)})));
    }
    all_finished = all_finished && finished(i);
  }
  if (all_finished) {
    if (r.include_usage) {
      json last = chunk(json::array());
      last["usage"] = usage();
      out += event(last);
    }
    out += "data: [DONE]\n\n";
    done_ = true;
  }
  return out;
}

std::string CompletionRelay::chat_events(size_t index, Choice& c, const engine::RequestOutput& o, json chat_lp) {
  const int first_call = c.fields.num_calls();
  ChoiceDelta d = c.fields.push(o.text, o.finished);
  std::vector<json> deltas;  // each its own chunk: the text first, then each call's two deltas
  json text = json::object();
  if (!d.reasoning.empty()) text["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) text["content"] = d.content;
  const bool logprobs = request_->sampling.logprobs;
  if (!text.empty() || (logprobs && !chat_lp.empty()) || (d.calls.empty() && o.finished)) deltas.push_back(std::move(text));
  for (json& t : tool_call_deltas(d.calls, first_call)) deltas.push_back({{"tool_calls", json::array({std::move(t)})}});
  std::string out;
  for (size_t k = 0; k < deltas.size(); ++k) {
    json j = {{"index", index}, {"delta", std::move(deltas[k])}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (logprobs) j["logprobs"] = {{"content", k == 0 ? std::move(chat_lp) : json::array()}};
    if (o.finished && k + 1 == deltas.size()) {
      const bool calls = c.fields.num_calls() > 0 && o.finish_reason == engine::FinishReason::kStop;
      j["finish_reason"] = calls ? json("tool_calls") : finish_reason_json(true, o.finish_reason);
    }
    out += event(chunk(json::array({std::move(j)})));
  }
  return out;
}

std::string CompletionRelay::abort_events(const std::string& reason) {
  return event(ApiError(503, "server_shutting_down", "", reason).to_json()) + "data: [DONE]\n\n";
}

bool CompletionRelay::poll() {
  if (done_) return true;
  bool all_finished = true;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    engine::RequestOutput o;
    while (next_output(i, o)) {
      if (o.finished || o.finish_reason == engine::FinishReason::kError) set_finished(i);
      c.finish_reason = o.finish_reason;
      if (o.finish_reason == engine::FinishReason::kError) {
        c.error = o.error.empty() ? "unknown error" : o.error;
        cancel();
        done_ = true;
        return true;
      }
      ChoiceDelta d = c.fields.push(o.text, o.finished);
      c.text += d.content;
      c.reasoning += d.reasoning;
      for (auto& call : d.calls) c.calls.push_back(std::move(call));
      c.num_output_tokens = o.num_output_tokens;
      c.num_accepted_draft_tokens = o.num_accepted_draft_tokens;
      c.num_cached_prompt_tokens = o.num_cached_prompt_tokens;
      take_prompt_logprobs(c, o, c.completion_lp);
      append_logprobs(c, o, c.completion_lp, c.chat_lp);
    }
    all_finished = all_finished && finished(i);
  }
  done_ = all_finished;
  return done_;
}

// {"role": "assistant", "content", ["reasoning_content",] ["tool_calls"]}: content null when the
// choice made calls and said nothing else; reasoning_content present (null when empty) whenever
// the model has a reasoning format.
json CompletionRelay::message(const Choice& c) const {
  json m = {{"role", "assistant"}, {"content", c.text.empty() && !c.calls.empty() ? json(nullptr) : json(c.text)}};
  if (submitted_.parsing.reasoning) m["reasoning_content"] = c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
  if (!c.calls.empty()) m["tool_calls"] = tool_calls_json(c.calls);
  return m;
}

json CompletionRelay::response() const {
  const GenerationRequest& r = *request_;
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    if (!c.error.empty()) throw ApiError(500, "internal_error", "", "generation failed: " + c.error);
    json choice = {{"index", i}, {"finish_reason", finish_reason_json(finished(i), c.finish_reason)}};
    if (r.chat) {
      if (!c.calls.empty() && c.finish_reason == engine::FinishReason::kStop) choice["finish_reason"] = "tool_calls";
      choice["message"] = message(c);
      choice["logprobs"] = r.sampling.logprobs ? json{{"content", c.chat_lp}} : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = r.sampling.logprobs ? c.completion_lp : json(nullptr);
      if (r.vllm_prompt_logprobs) choice["prompt_logprobs"] = c.vllm_prompt_lp;
    }
    choices.push_back(std::move(choice));
  }
  json body = {{"id", id_},
               {"object", r.chat ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", engine_.model_name()},
               {"choices", std::move(choices)},
               {"usage", usage()}};
  // vLLM puts a chat completion's prompt_logprobs beside its choices (the prompt is theirs alike).
  if (r.chat && r.vllm_prompt_logprobs) body["prompt_logprobs"] = choices_.front().vllm_prompt_lp;
  return body;
}

}  // namespace spindle::server
