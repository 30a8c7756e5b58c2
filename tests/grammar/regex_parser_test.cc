// The regex front end against python3's re (an independent backtracking matcher): for each
// pattern, strings generated from the pattern's own grammar (should match) and random strings
// over the pattern's alphabet plus mutations (mostly should not), each judged by both. Patterns
// keep to the syntax ECMA-262 and Python read alike; texts are ASCII.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "grammar/matcher.h"
#include "support/byte_grammar.h"
#include "grammar/regex_parser.h"
#include "grammar/simple_grammars.h"
#include "util/error.h"

namespace spindle::grammar {
namespace {

using testing::byte_vocab;

const char* const kPatterns[] = {
    R"(a|b|ab)", R"((ab)*c?)", R"(\d{2,4}-\w+)", R"([^a-c]x[a-c]{0,2})", R"(\s?(x|y){3}z+)",
    R"((?:ab|a)(?:bc|c))", R"([A-Fa-f0-9]{1,3}\.[0-9]+)", R"(a{2}b{1,}c{0,1})", R"(\x41\u0042[\-.]\t?)",
    R"(((a|b)c)+d)", R"([\w.-]+@[a-z]+\.(com|org))", R"(.a.?)", R"([^\d\s]+\D)", R"(x*?y+?z??)",
    R"(a\{1\}|\(b\))",
};
const char* const kSearchPatterns[] = {R"(^ab+c)", R"(b\d$)", R"(x|^y)", R"(^(a|bc)*$)", R"(c)"};

std::string alphabet() { return "abcdxyzABF019-._@\t {}()\\\n"; }

// Random strings the pattern's grammar accepts (walk allowed ASCII bytes).
std::string walk(Matcher m, std::mt19937& rng) {
  std::string out;
  for (int i = 0; i < 40; ++i) {
    if (m.is_complete() && rng() % 3 == 0) break;
    std::vector<int> ascii;
    const std::bitset<256> allowed = m.allowed_bytes();
    for (int b = 1; b < 128; ++b) {
      if (allowed[static_cast<size_t>(b)]) ascii.push_back(b);
    }
    if (ascii.empty()) break;
    const char c = static_cast<char>(ascii[rng() % ascii.size()]);
    m.accept_bytes(std::string(1, c));
    out += c;
  }
  return out;
}

TEST(RegexParser, AgreesWithPythonRe) {
  std::mt19937 rng(3);
  const auto vocab = byte_vocab();
  nlohmann::json jobs = nlohmann::json::array();
  std::vector<bool> ours;
  auto add = [&](const std::string& pattern, bool search, const std::string& text) {
    auto g = CompiledGrammar::compile([&] {
      if (!search) return grammar_from_regex(pattern);
      Grammar gr;
      const int32_t root = gr.add_nonterminal("root");
      RegexPtr re = parse_regex(pattern, RegexMode::kSearch);
      if (regex_nullable(*re)) gr.add_production(root, {});
      gr.add_production(root, {gr.lexeme(re)});
      gr.set_start(root);
      return gr;
    }());
    Matcher m(g, vocab);
    ours.push_back(m.accept_bytes(text) && m.is_complete());
    jobs.push_back({{"pattern", pattern}, {"text", text}, {"search", search}});
  };
  auto texts = [&](const std::string& pattern, bool search) {
    Grammar gr = grammar_from_regex(pattern);
    std::vector<std::string> out;
    if (!search) {
      auto g = CompiledGrammar::compile(std::move(gr));
      for (int i = 0; i < 30; ++i) {
        std::string w = walk(Matcher(g, vocab), rng);
        out.push_back(w);
        if (!w.empty()) {  // mutations near the language
          std::string m = w;
          m[rng() % m.size()] = alphabet()[rng() % alphabet().size()];
          out.push_back(m);
          out.push_back(w + alphabet()[rng() % alphabet().size()]);
          out.push_back(w.substr(0, w.size() - 1));
        }
      }
    }
    for (int i = 0; i < 60; ++i) {
      std::string s;
      const size_t n = rng() % 8;
      for (size_t k = 0; k < n; ++k) s += alphabet()[rng() % alphabet().size()];
      out.push_back(s);
    }
    return out;
  };
  for (const char* p : kPatterns) {
    for (const std::string& t : texts(p, false)) add(p, false, t);
  }
  for (const char* p : kSearchPatterns) {
    for (const std::string& t : texts(p, true)) add(p, true, t);
  }
  const auto in = std::filesystem::temp_directory_path() / ("spindle_regex_" + std::to_string(::getpid()) + ".jsonl");
  const auto out = in.string() + ".out";
  {
    std::ofstream f(in);
    for (const auto& j : jobs) f << j.dump() << "\n";
  }
  const std::string script = std::string(SPINDLE_FIXTURES_DIR) + "/../grammar/regex_match.py";
  ASSERT_EQ(std::system(("python3 " + script + " < " + in.string() + " > " + out).c_str()), 0);
  std::ifstream f(out);
  std::string line;
  size_t i = 0, positives = 0;
  while (std::getline(f, line)) {
    ASSERT_LT(i, jobs.size());
    EXPECT_EQ(ours[i], line == "1") << "pattern /" << jobs[i]["pattern"].get<std::string>() << "/ text "
                                    << jobs[i]["text"].dump() << " search " << jobs[i]["search"];
    positives += line == "1";
    ++i;
  }
  EXPECT_EQ(i, jobs.size());
  EXPECT_GT(positives, jobs.size() / 5);  // the comparison covers matches, not only misses
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

void expect_error(const std::string& pattern, const std::string& needle) {
  try {
    parse_regex(pattern, RegexMode::kFullMatch);
    ADD_FAILURE() << "no error for /" << pattern << "/";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

TEST(RegexParser, UnsupportedConstructsNamed) {
  expect_error("a(?=b)", "lookahead");
  expect_error("a(?!b)", "lookahead");
  expect_error("(?<=a)b", "lookbehind");
  expect_error("(?<!a)b", "lookbehind");
  expect_error("(a)\\1", "backreference");
  expect_error("(?<n>a)\\k<n>", "backreference");
  expect_error("\\bword", "word boundary");
  expect_error("(a", "missing ')'");
  expect_error("a)", "unmatched ')'");
  expect_error("[a", "missing ']'");
  expect_error("*a", "nothing to repeat");
  expect_error("a{3,1}", "n < m");
  expect_error("[z-a]", "out of order");
  expect_error("a{99999}", "repetition count");
}

// The limits shared with the GBNF front end (regex_ast.h): kMaxGroupDepth nested groups parse,
// one more is refused; a count of kMaxRepeatCount parses, one more is refused.
TEST(RegexParser, SharedLimits) {
  const auto nested = [](int depth) {
    return std::string(static_cast<size_t>(depth), '(') + "a" + std::string(static_cast<size_t>(depth), ')');
  };
  EXPECT_NO_THROW(parse_regex(nested(kMaxGroupDepth), RegexMode::kFullMatch));
  expect_error(nested(kMaxGroupDepth + 1), "nested too deeply");
  EXPECT_NO_THROW(parse_regex("a{" + std::to_string(kMaxRepeatCount) + "}", RegexMode::kFullMatch));
  expect_error("a{" + std::to_string(kMaxRepeatCount + 1) + "}", "repetition count above 10000");
}

TEST(RegexParser, UnicodeClassesMatchUtf8) {
  const auto vocab = byte_vocab();
  auto g = CompiledGrammar::compile(grammar_from_regex("[α-ω]+\\u{1F600}?[^a]"));
  auto ok = [&](const std::string& s) {
    Matcher m(g, vocab);
    return m.accept_bytes(s) && m.is_complete();
  };
  EXPECT_TRUE(ok("αβγ😀b"));
  EXPECT_TRUE(ok("ωé"));
  EXPECT_FALSE(ok("αa"));
  EXPECT_FALSE(ok("a"));
  EXPECT_FALSE(ok("α\xff"));  // not UTF-8
}

}  // namespace
}  // namespace spindle::grammar
