// Tokens -> statements, with jinja2's grammar and operator precedence (lowest first):
//   a if b else c; or; and; not; comparisons (==, !=, <, <=, >, >=, in, not in; chained);
//   + -; ~; * / // %; **; unary - +; primary with .attr, [index], [a:b:c], (call), |filter, is test.
// Statements: if/elif/else, for (targets, loop filter, else), set (also ns.attr and blocks),
// macro, call, filter, with, break, continue, raw, and transformers' generation block.
#pragma once

#include "jinja/ast.h"
#include "jinja/lexer.h"

#include <string>
#include <vector>

namespace spindle::jinja {

// Nesting deeper than this (brackets, blocks) is a syntax error: rendering recurses over the tree.
inline constexpr int kMaxParseDepth = 96;

// Errors are TemplateErrors of kind kSyntax naming template_name and the line.
Body parse(const std::vector<Token>& tokens, const std::string& template_name);

}  // namespace spindle::jinja
