// Template text -> tokens, with jinja2's whitespace rules as transformers configures them:
// newlines normalised to "\n" and one trailing newline dropped (keep_trailing_newline=False);
// trim_blocks (the newline after a block or comment tag is removed), lstrip_blocks (spaces and
// tabs from the start of a line up to a block or comment tag are removed; "{%+" keeps them),
// "{%-" / "-%}" (and the {{ }} and {# #} forms) strip all whitespace before / after the tag.
// Raw blocks become text; comments vanish.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::jinja {

enum class TokenType { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOperator, kEof };

struct Token {
  TokenType type;
  std::string value;  // text, name, decoded string literal, or the operator's spelling
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// Errors (an unterminated tag, comment or string, an unknown character) are TemplateErrors of
// kind kSyntax naming template_name and the line.
std::vector<Token> lex(std::string_view source, const std::string& template_name);

}  // namespace spindle::jinja
