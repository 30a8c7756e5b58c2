#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#if SPINDLE_TOKENIZER_HAVE_ICU
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#endif

#include "util/error.h"

namespace spindle::tokenizer {
namespace {

std::string nfc(std::string_view text) {
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);  // ASCII is always in NFC
#if SPINDLE_TOKENIZER_HAVE_ICU
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(status);
  SPINDLE_CHECK(U_SUCCESS(status), "ICU NFC normalizer unavailable: {}", u_errorName(status));
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  normalizer->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr,
                            status);
  SPINDLE_CHECK(U_SUCCESS(status), "NFC normalization failed: {}", u_errorName(status));
  return out;
#else
  SPINDLE_FAIL("unreachable: NFC normalizer without ICU");
#endif
}

}  // namespace

std::string prepend(std::string_view prefix, std::string_view text) {
  std::string out;
  out.reserve(prefix.size() + text.size());
  out.append(prefix);
  out.append(text);
  return out;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  Normalizer n;
  add_steps(j, n.steps_);
  return n;
}

void Normalizer::add_steps(const nlohmann::json& j, std::vector<Step>& steps) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : j.at("normalizers")) add_steps(child, steps);
  } else if (type == "Prepend") {
    steps.push_back({Step::Kind::kPrepend, "", j.at("prepend").get<std::string>()});
  } else if (type == "Replace") {
    const auto& pattern = j.at("pattern");
    SPINDLE_CHECK(pattern.contains("String"),
                  "tokenizer.json: normalizer Replace with a Regex pattern is not supported (String only)");
    std::string from = pattern.at("String").get<std::string>();
    SPINDLE_CHECK(!from.empty(), "tokenizer.json: normalizer Replace has an empty pattern");
    steps.push_back({Step::Kind::kReplace, std::move(from), j.at("content").get<std::string>()});
  } else if (type == "NFC") {
#if SPINDLE_TOKENIZER_HAVE_ICU
    steps.push_back({Step::Kind::kNfc, "", ""});
#else
    SPINDLE_FAIL("tokenizer.json: normalizer 'NFC' needs ICU, and this build has none (install libicu-dev "
                 "and rebuild)");
#endif
  } else {
    SPINDLE_FAIL("tokenizer.json: normalizer '{}' is not supported (supported: null, Sequence, Prepend, "
                 "Replace, NFC)",
                 type);
  }
}

std::string Normalizer::apply(std::string_view text, bool continues_text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kPrepend:
        // Like HF: an empty piece stays empty.
        if (!s.empty() && !continues_text) s = prepend(step.content, s);
        break;
      case Step::Kind::kReplace:
        s = replace_all(s, step.pattern, step.content);
        break;
      case Step::Kind::kNfc:
        s = nfc(s);
        break;
    }
  }
  return s;
}

}  // namespace spindle::tokenizer
