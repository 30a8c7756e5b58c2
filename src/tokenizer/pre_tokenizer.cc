#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <optional>

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "util/error.h"

namespace spindle::tokenizer {
namespace {

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex=true).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext };

SplitBehavior parse_behavior(const std::string& name) {
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  SPINDLE_FAIL("tokenizer.json: Split behavior '{}' is not supported (supported: Isolated, Removed, "
               "MergedWithPrevious, MergedWithNext)",
               name);
}

// A word in flight: its text and whether it begins the whole input.
struct Piece {
  std::string text;
  bool at_text_start;
};

void apply_split(const Regex& regex, SplitBehavior behavior, bool invert, const Piece& piece,
                 std::vector<Piece>& out) {
  std::vector<TextSpan> spans = regex.partition(piece.text);
  const std::string_view text = piece.text;
  std::optional<Piece> carry;  // MergedWithNext: a delimiter waiting for its next piece
  bool first = true;
  auto emit = [&](std::string s) {
    out.push_back({std::move(s), piece.at_text_start && first});
    first = false;
  };
  for (const TextSpan& span : spans) {
    const bool delimiter = span.is_match != invert;
    std::string s(text.substr(span.begin, span.end - span.begin));
    switch (behavior) {
      case SplitBehavior::kIsolated:
        emit(std::move(s));
        break;
      case SplitBehavior::kRemoved:
        if (!delimiter) emit(std::move(s));
        first = false;
        break;
      case SplitBehavior::kMergedWithPrevious:
        if (delimiter && !out.empty() && !first) {
          out.back().text += s;
        } else {
          emit(std::move(s));
        }
        break;
      case SplitBehavior::kMergedWithNext:
        if (delimiter) {
          if (carry) {
            carry->text += s;
          } else {
            carry = Piece{std::move(s), false};
          }
        } else {
          if (carry) s = carry->text + s;
          carry.reset();
          emit(std::move(s));
        }
        break;
    }
  }
  if (carry) emit(std::move(carry->text));
}

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind;
  std::unique_ptr<Regex> regex;  // kSplit; kByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
  std::string replacement;        // kMetaspace
  std::string prepend_scheme;     // kMetaspace: "always", "first" or "never"
  bool split = true;              // kMetaspace
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j) {
  PreTokenizer p;
  add_steps(j, p.steps_);
  return p;
}

void PreTokenizer::add_steps(const nlohmann::json& j, std::vector<Step>& steps) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  Step step{};
  if (type == "Sequence") {
    for (const auto& child : j.at("pretokenizers")) add_steps(child, steps);
    return;
  } else if (type == "Split") {
    const auto& pattern = j.at("pattern");
    step.kind = Step::Kind::kSplit;
    if (pattern.contains("Regex")) {
      step.regex = std::make_unique<Regex>(pattern.at("Regex").get<std::string>());
    } else {
      step.regex = std::make_unique<Regex>(pattern.at("String").get<std::string>(), /*literal=*/true);
    }
    step.behavior = parse_behavior(j.at("behavior").get<std::string>());
    step.invert = j.value("invert", false);
  } else if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    step.add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) step.regex = std::make_unique<Regex>(kGpt2Pattern);
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    step.replacement = j.value("replacement", "\u2581");
    if (j.contains("prepend_scheme")) {
      step.prepend_scheme = j.at("prepend_scheme").get<std::string>();
    } else {  // older files: add_prefix_space
      step.prepend_scheme = j.value("add_prefix_space", true) ? "always" : "never";
    }
    SPINDLE_CHECK(step.prepend_scheme == "always" || step.prepend_scheme == "first" ||
                      step.prepend_scheme == "never",
                  "tokenizer.json: Metaspace prepend_scheme '{}' is not one of first, always, never",
                  step.prepend_scheme);
    step.split = j.value("split", true);
  } else {
    SPINDLE_FAIL("tokenizer.json: pre_tokenizer '{}' is not supported (supported: null, Sequence, Split, "
                 "ByteLevel, Metaspace)",
                 type);
  }
  steps.push_back(std::move(step));
}

bool PreTokenizer::is_byte_level() const {
  for (const Step& step : steps_) {
    if (step.kind == Step::Kind::kByteLevel) return true;
  }
  return false;
}

void PreTokenizer::split(std::string_view text, bool at_text_start, std::vector<std::string>& words,
                         bool continues_text) const {
  // A piece that begins the given text, where that text continues another: no prefix of any kind.
  const auto continues = [&](const Piece& piece) { return continues_text && piece.at_text_start; };
  std::vector<Piece> pieces{{std::string(text), at_text_start}};
  std::vector<Piece> next;
  for (const Step& step : steps_) {
    next.clear();
    for (Piece& piece : pieces) {
      if (piece.text.empty()) continue;
      switch (step.kind) {
        case Step::Kind::kSplit:
          apply_split(*step.regex, step.behavior, step.invert, piece, next);
          break;
        case Step::Kind::kByteLevel: {
          if (step.add_prefix_space && !continues(piece) && !piece.text.starts_with(' ')) {
            piece.text = prepend(" ", piece.text);
          }
          std::vector<Piece> parts;
          if (step.regex) {
            apply_split(*step.regex, SplitBehavior::kIsolated, false, piece, parts);
          } else {
            parts.push_back(std::move(piece));
          }
          for (Piece& part : parts) {
            Piece mapped{"", part.at_text_start};
            byte_level_encode(part.text, mapped.text);
            next.push_back(std::move(mapped));
          }
          break;
        }
        case Step::Kind::kMetaspace: {
          std::string s = replace_all(piece.text, " ", step.replacement);
          const bool add_prefix = !continues(piece) && (step.prepend_scheme == "always" ||
                                                         (step.prepend_scheme == "first" && piece.at_text_start));
          if (add_prefix && !s.starts_with(step.replacement)) s = prepend(step.replacement, s);
          if (!step.split) {
            next.push_back({std::move(s), piece.at_text_start});
            break;
          }
          // Each replacement character starts a new word (MergedWithNext).
          size_t begin = 0;
          bool first = true;
          while (begin < s.size()) {
            size_t end = s.find(step.replacement, begin + 1);
            if (end == std::string::npos) end = s.size();
            next.push_back({s.substr(begin, end - begin), piece.at_text_start && first});
            first = false;
            begin = end;
          }
          break;
        }
      }
    }
    pieces.swap(next);
  }
  for (Piece& piece : pieces) {
    if (!piece.text.empty()) words.push_back(std::move(piece.text));
  }
}

}  // namespace spindle::tokenizer
