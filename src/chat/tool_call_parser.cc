#include "chat/tool_call_parser.h"

#include <algorithm>
#include <array>
#include <random>

#include "chat/format_table.h"
#include "chat/generic_tool_format.h"
#include "chat/marker.h"
#include "chat/qwen3_coder_format.h"
#include "chat/tool_call_json.h"
#include "util/error.h"

namespace spindle::chat {

using nlohmann::ordered_json;

namespace {

constexpr std::array kFormats = std::to_array<ToolCallFormat>({
    {"hermes", ToolCallIdStyle::kOpenAi, false},
    {"qwen3_coder", ToolCallIdStyle::kOpenAi, false},
    {"llama3_json", ToolCallIdStyle::kOpenAi, false},
    {"mistral", ToolCallIdStyle::kMistral, true},
    {"deepseek_v3", ToolCallIdStyle::kOpenAi, true},
    {"generic", ToolCallIdStyle::kOpenAi, false},
});

constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";

std::string_view trim(std::string_view s) {
  s = strip_leading_space(s);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// How one block's body becomes a call (nullopt: it does not parse); text: the tools' text
// parameters (qwen3_coder).
using BlockDecoder = std::optional<ToolCall> (*)(std::string_view body, ToolCallIdStyle style,
                                                 const TextParameters& text);

std::optional<ToolCall> decode_json_block(std::string_view body, ToolCallIdStyle style, const TextParameters&) {
  auto j = parse_json(body);
  if (!j) return std::nullopt;
  return call_from_json(*j, style);
}

// "<function=f>\n<parameter=p>\nvalue\n</parameter>\n...</function>"; a text parameter's value
// as written, any other as JSON when it parses (chat/qwen3_coder_format.h).
std::optional<ToolCall> decode_xml_block(std::string_view body, ToolCallIdStyle style, const TextParameters& text) {
  constexpr std::string_view kFunction = "<function=", kParameter = "<parameter=", kParameterEnd = "</parameter>";
  body = trim(body);
  if (!body.starts_with(kFunction)) return std::nullopt;
  const size_t name_end = body.find('>');
  if (name_end == std::string_view::npos) return std::nullopt;
  const std::string name(body.substr(kFunction.size(), name_end - kFunction.size()));
  ordered_json call = {{"name", name}, {"arguments", ordered_json::object()}};
  const auto text_of = text.find(name);
  size_t at = name_end + 1;
  for (size_t p = body.find(kParameter, at); p != std::string_view::npos; p = body.find(kParameter, at)) {
    const size_t key_end = body.find('>', p);
    const size_t value_end = key_end == std::string_view::npos ? key_end : body.find(kParameterEnd, key_end);
    if (value_end == std::string_view::npos) return std::nullopt;
    const std::string key(body.substr(p + kParameter.size(), key_end - p - kParameter.size()));
    std::string_view value = body.substr(key_end + 1, value_end - key_end - 1);
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    const bool is_text = text_of != text.end() && text_of->second.contains(key);
    auto as_json = is_text ? std::nullopt : parse_json(value);
    call["arguments"][key] = as_json ? std::move(*as_json) : ordered_json(std::string(value));
    at = value_end + kParameterEnd.size();
  }
  if (!trim(body.substr(at)).starts_with("</function>")) return std::nullopt;
  return call_from_json(call, style);
}

// "function<｜tool▁sep｜>name\n```json\n{...}\n```" (DeepSeek R1 / V3)
std::optional<ToolCall> decode_deepseek_block(std::string_view body, ToolCallIdStyle style, const TextParameters&) {
  const size_t sep = body.find(kDeepSeekSep);
  if (sep == std::string_view::npos) return std::nullopt;
  std::string_view rest = body.substr(sep + kDeepSeekSep.size());
  const size_t newline = rest.find('\n');
  if (newline == std::string_view::npos) return std::nullopt;
  const std::string name(trim(rest.substr(0, newline)));
  std::string_view args = trim(rest.substr(newline + 1));
  if (!args.starts_with("```json") || !args.ends_with("```") || args.size() < 10) return std::nullopt;
  auto j = parse_json(args.substr(7, args.size() - 10));
  if (!j) return std::nullopt;
  return call_from_json(ordered_json{{"name", name}, {"arguments", std::move(*j)}}, style);
}

// A block format: its markers, the markers around a group of calls (dropped), how a body reads.
struct BlockSyntax {
  std::string_view open, close;
  std::array<std::string_view, 2> dropped;
  BlockDecoder decode;
};

constexpr BlockSyntax kHermes{"<tool_call>", "</tool_call>", {}, decode_json_block};
constexpr BlockSyntax kQwen3Coder{"<tool_call>", "</tool_call>", {}, decode_xml_block};
constexpr BlockSyntax kDeepSeek{"<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
                                {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"}, decode_deepseek_block};

// Calls in marked blocks (<tool_call>...</tool_call>), each released as soon as it closes. The
// group markers (special tokens, so each arrives whole) are dropped wherever they appear.
class BlockParser final : public ToolCallParser {
 public:
  BlockParser(const BlockSyntax& syntax, ToolCallIdStyle style, TextParameters text = {})
      : syntax_(syntax), style_(style), text_(std::move(text)) {}

  ToolCallDelta push(std::string_view text) override {
    ToolCallDelta out;
    held_ += text;
    for (std::string_view marker : syntax_.dropped) {
      for (size_t at; !marker.empty() && (at = held_.find(marker)) != std::string::npos;) held_.erase(at, marker.size());
    }
    while (state_ == State::kInCall ? close_call(out) : open_call(out)) {
    }
    return out;
  }

  ToolCallDelta finish() override {
    ToolCallDelta out;
    if (state_ == State::kInCall) {
      auto call = syntax_.decode(held_, style_, text_);
      if (call) {
        out.calls.push_back(std::move(*call));
      } else {
        out.content = std::string(syntax_.open) + held_;
      }
    } else {
      between_ += held_;
      if (state_ == State::kText || !all_space(between_)) out.content = between_;
    }
    held_.clear();
    between_.clear();
    return out;
  }

 private:
  enum class State { kText, kInCall, kAfterCall };

  // Text state: content up to an opening marker (true: one was found, the loop goes on).
  bool open_call(ToolCallDelta& out) {
    const size_t open = held_.find(syntax_.open);
    size_t keep = partial_marker_suffix(held_, syntax_.open);  // bytes that may begin a marker
    for (std::string_view marker : syntax_.dropped) {
      if (!marker.empty()) keep = std::max(keep, partial_marker_suffix(held_, marker));
    }
    const size_t cut = open != std::string::npos ? open : held_.size() - keep;
    between_ += held_.substr(0, cut);
    held_.erase(0, open != std::string::npos ? open + syntax_.open.size() : cut);
    // Before the first call everything is content; after a call, whitespace waits (dropped at the end).
    if (state_ == State::kText || !all_space(between_)) {
      out.content += between_;
      between_.clear();
      state_ = State::kText;
    }
    if (open == std::string::npos) return false;
    between_.clear();
    state_ = State::kInCall;
    return true;
  }

  bool close_call(ToolCallDelta& out) {
    const size_t close = held_.find(syntax_.close);
    if (close == std::string::npos) return false;
    const std::string body = held_.substr(0, close);
    if (auto call = syntax_.decode(body, style_, text_)) {
      out.calls.push_back(std::move(*call));
      state_ = State::kAfterCall;
    } else {
      out.content += std::string(syntax_.open) + body + std::string(syntax_.close);
      state_ = State::kText;
    }
    held_.erase(0, close + syntax_.close.size());
    return true;
  }

  const BlockSyntax& syntax_;
  ToolCallIdStyle style_;
  TextParameters text_;
  State state_ = State::kText;
  std::string held_;
  std::string between_;  // after a call: text before the next marker
};

// Llama 3.x: an output that starts with '{' (or <|python_tag|>) is held whole and read as calls
// at the end; any other output is content as it comes.
class LeadingJsonParser final : public ToolCallParser {
 public:
  ToolCallDelta push(std::string_view text) override {
    ToolCallDelta out;
    if (state_ == State::kText) {
      out.content = text;
      return out;
    }
    held_ += text;
    if (state_ == State::kStart) {
      std::string_view s = strip_leading_space(held_);
      if (s.starts_with(kPythonTag)) s = strip_leading_space(s.substr(kPythonTag.size()));
      if (s.empty() || kPythonTag.starts_with(s)) return out;
      state_ = s.front() == '{' ? State::kJson : State::kText;
      if (state_ == State::kText) out.content = std::move(held_);
    }
    return out;
  }

  ToolCallDelta finish() override {
    ToolCallDelta out;
    if (state_ == State::kJson) out.calls = parse_calls();
    if (out.calls.empty()) out.content = std::move(held_);
    held_.clear();
    return out;
  }

 private:
  enum class State { kStart, kJson, kText };

  // Objects separated by ';' and whitespace; all of them calls, or none is taken.
  std::vector<ToolCall> parse_calls() const {
    std::string_view s = strip_leading_space(held_);
    if (s.starts_with(kPythonTag)) s.remove_prefix(kPythonTag.size());
    std::vector<ToolCall> calls;
    for (s = trim(s); !s.empty(); s = trim(s)) {
      if (s.front() == ';' && !calls.empty()) {
        s.remove_prefix(1);
        continue;
      }
      const size_t end = s.front() == '{' ? json_value_end(s, 0) : std::string_view::npos;
      auto j = end == std::string_view::npos ? std::nullopt : parse_json(s.substr(0, end));
      auto call = j ? call_from_json(*j, ToolCallIdStyle::kOpenAi) : std::nullopt;
      if (!call) return {};
      calls.push_back(std::move(*call));
      s.remove_prefix(end);
    }
    return calls;
  }

  State state_ = State::kStart;
  std::string held_;
};

// Mistral: content up to [TOOL_CALLS]; from there the output is held and read as calls at the end.
class MistralParser final : public ToolCallParser {
 public:
  ToolCallDelta push(std::string_view text) override {
    ToolCallDelta out;
    held_ += text;
    if (in_calls_) return out;
    const size_t at = held_.find(kMistralCalls);
    const size_t cut = at != std::string::npos ? at : held_.size() - partial_marker_suffix(held_, kMistralCalls);
    out.content = held_.substr(0, cut);
    held_.erase(0, cut);
    in_calls_ = at != std::string::npos;
    return out;
  }

  ToolCallDelta finish() override {
    ToolCallDelta out;
    if (in_calls_) out.calls = parse_calls(held_);
    if (out.calls.empty()) out.content = std::move(held_);
    held_.clear();
    return out;
  }

 private:
  // One or more "[TOOL_CALLS]" sections, each a JSON array of calls or "name[ARGS]{...}".
  static std::vector<ToolCall> parse_calls(std::string_view text) {
    std::vector<ToolCall> calls;
    while (!text.empty()) {
      if (!text.starts_with(kMistralCalls)) return {};
      text.remove_prefix(kMistralCalls.size());
      const size_t next = text.find(kMistralCalls);
      const std::string_view section = trim(text.substr(0, next));
      text = next == std::string_view::npos ? std::string_view() : text.substr(next);
      if (!read_section(section, calls)) return {};
    }
    return calls;
  }

  static bool read_section(std::string_view section, std::vector<ToolCall>& calls) {
    if (section.starts_with('[')) {
      auto j = parse_json(section);
      if (!j || !j->is_array() || j->empty()) return false;
      for (const auto& item : *j) {
        auto call = call_from_json(item, ToolCallIdStyle::kMistral);
        if (!call) return false;
        calls.push_back(std::move(*call));
      }
      return true;
    }
    const size_t args = section.find(kMistralArgs);
    if (args == std::string_view::npos) return false;
    auto j = parse_json(section.substr(args + kMistralArgs.size()));
    if (!j) return false;
    // "name[CALL_ID]id[ARGS]" (Magistral) keeps the name before any other marker.
    const std::string_view name = trim(section.substr(0, std::min(args, section.find('['))));
    auto call = call_from_json(ordered_json{{"name", std::string(name)}, {"arguments", *j}}, ToolCallIdStyle::kMistral);
    if (!call) return false;
    calls.push_back(std::move(*call));
    return true;
  }

  bool in_calls_ = false;
  std::string held_;
};

}  // namespace

std::span<const ToolCallFormat> tool_call_formats() { return kFormats; }

const ToolCallFormat& find_tool_call_format(std::string_view name) {
  return find_format(tool_call_formats(), name, "tool-call parser");
}

const ToolCallFormat* detect_tool_call_format(std::string_view t) {
  auto has = [t](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<tool_call>") && has("<function=")) return &find_tool_call_format("qwen3_coder");
  if (has("<tool_call>")) return &find_tool_call_format("hermes");
  if (has("[TOOL_CALLS]")) return &find_tool_call_format("mistral");
  if (has("<｜tool▁call▁begin｜>")) return &find_tool_call_format("deepseek_v3");
  if (has("<|start_header_id|>") && (has("<|python_tag|>") || has("\"parameters\": "))) {
    return &find_tool_call_format("llama3_json");
  }
  return nullptr;
}

std::string make_tool_call_id(ToolCallIdStyle style) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  const bool openai = style == ToolCallIdStyle::kOpenAi;
  std::string id = openai ? "call_" : "";
  for (int i = 0; i < (openai ? 24 : 9); ++i) id += kAlphabet[pick(rng)];
  return id;
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(const ToolCallFormat& format, const ordered_json* tools) {
  if (format.name == "hermes") return std::make_unique<BlockParser>(kHermes, format.id_style);
  if (format.name == "qwen3_coder") {
    return std::make_unique<BlockParser>(kQwen3Coder, format.id_style,
                                         tools ? text_parameters(*tools) : TextParameters{});
  }
  if (format.name == "deepseek_v3") return std::make_unique<BlockParser>(kDeepSeek, format.id_style);
  if (format.name == "llama3_json") return std::make_unique<LeadingJsonParser>();
  if (format.name == "generic") return make_generic_tool_call_parser(format.id_style);
  return std::make_unique<MistralParser>();
}

}  // namespace spindle::chat
