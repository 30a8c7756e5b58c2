#include "grammar/simple_grammars.h"

#include "grammar/regex_parser.h"
#include "util/error.h"

namespace spindle::grammar {

Grammar grammar_from_regex(std::string_view pattern) {
  Grammar g;
  const int32_t root = g.add_nonterminal("root");
  RegexPtr re = parse_regex(pattern, RegexMode::kFullMatch);
  if (regex_nullable(*re)) {
    g.add_production(root, {});
  }
  g.add_production(root, {g.lexeme(re)});
  g.set_start(root);
  return g;
}

Grammar grammar_from_choices(const std::vector<std::string>& choices) {
  SPINDLE_CHECK(!choices.empty(), "choice list is empty");
  Grammar g;
  const int32_t root = g.add_nonterminal("root");
  for (size_t i = 0; i < choices.size(); ++i) {
    size_t pos = 0;
    char32_t c = 0;
    while (pos < choices[i].size()) {
      SPINDLE_CHECK(next_utf8(choices[i], pos, c), "choice {} is not valid UTF-8", i);
    }
    if (choices[i].empty()) {
      g.add_production(root, {});
    } else {
      g.add_production(root, {g.literal(choices[i])});
    }
  }
  g.set_start(root);
  return g;
}

}  // namespace spindle::grammar
