// Issue 44's jump-forward target on the CPU: "with jump-forward, a response to a schema with 6
// fixed keys finishes faster (mean of 20) than an unconstrained ignore_eos response of the same
// token count".
//
// One engine (batch 1, prefix cache off so no arm reuses another's prompt) serves, per iteration,
// interleaved so the machine's load meets every arm alike:
//   A: the 6-key schema (the server's default JSON options: compact whitespace, strict), greedy,
//      jump-forward on (the engine's default);
//   B: the same prompt unconstrained, greedy, ignore_eos, max_tokens = A's token count;
//   C: A again with jump-forward off (a second engine, EngineOptions::jump_forward = false): what
//      jump-forward itself is worth; its tokens must equal A's (checked: the run fails otherwise).
// Time: submit to the final event, in-process (no HTTP; both arms would pay it alike). Prints one
// TSV row per request and a summary (mean, median, min per arm; A / B and A / C of the means).
//
//   bench_grammar_jump_forward --model tests/golden/llama-gqa-f32 --iterations 20
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "bench/bench_cli.h"
#include "engine/engine.h"
#include "engine/metrics.h"
#include "engine/runner.h"
#include "grammar/json_schema.h"
#include "kv/kv_layout.h"
#include "kv/page_pool.h"
#include "model/model_loader.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace spindle {
namespace {

const char* const kFixedKeys = R"({"type": "object", "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 999},
    "name": {"enum": ["alpha", "beta", "gamma"]},
    "active": {"type": "boolean"},
    "score": {"type": "integer", "minimum": -50, "maximum": 50},
    "color": {"enum": ["red", "green", "blue"]},
    "verified": {"type": "boolean"}},
  "required": ["id", "name", "active", "score", "color", "verified"], "additionalProperties": false})";

const char* const kPrompts[] = {"Return the record as JSON.", "A record:", "The answer is", "id name active score",
                                "In the beginning", "Describe the item.", "Output:", "Here is the data",
                                "{", "JSON please"};

// One model, its backends, runner, pool and engine.
struct Served {
  std::unique_ptr<Transformer> model;
  std::unique_ptr<attn::AttentionBackend> prefill, decode;
  std::unique_ptr<engine::Runner> runner;
  std::unique_ptr<kv::PagePool> pool;
  engine::Metrics metrics;
  std::unique_ptr<engine::Engine> engine;

  Served(const std::filesystem::path& dir, const tokenizer::Tokenizer& tok, const std::string& backend, bool jump_forward) {
    model = load_model(dir, LoadOptions{});
    const int page_size = 16, max_model_len = 512;
    const attn::AttentionShape shape = model->attention_shape(DType::kF32, page_size);
    prefill = attn::create_attention_backend(backend, shape, {});
    decode = attn::create_attention_backend(backend, shape, {});
    engine::RunnerOptions ro;
    ro.max_model_len = max_model_len;
    runner = std::make_unique<engine::Runner>(*model, *prefill, *decode, ro);
    const ModelConfig& c = model->config();
    pool = std::make_unique<kv::PagePool>(kv::KvLayout{c.num_hidden_layers, c.num_key_value_heads, c.head_dim,
                                                       DType::kF32, page_size},
                                          256, 1, attn::Device::kCpu);
    runner->bind_kv_caches(pool->layer_caches());
    engine::EngineOptions o;
    o.scheduler.max_num_batched_tokens = 512;
    o.scheduler.max_running_requests = 4;
    o.scheduler.max_model_len = max_model_len;
    o.max_queued_requests = 16;
    o.enable_prefix_cache = false;
    o.model_name = dir.filename().string();
    o.jump_forward = jump_forward;
    engine = std::make_unique<engine::Engine>(*runner, tok, nullptr, *pool, metrics, o);
    engine->start();
  }
};

struct Response {
  std::vector<TokenId> tokens;
  std::string text;
  engine::FinishReason finish = engine::FinishReason::kNone;
  double seconds = 0;
};

Response run(engine::Engine& e, const std::vector<TokenId>& prompt, const engine::SamplingParams& p) {
  Response r;
  const auto start = std::chrono::steady_clock::now();
  auto stream = e.submit(prompt, p);
  for (;;) {
    engine::RequestOutput o;
    SPINDLE_CHECK(stream->pop(o, std::chrono::seconds(600)), "a request timed out");
    SPINDLE_CHECK(o.error.empty(), "a request failed: {}", o.error);
    r.tokens.insert(r.tokens.end(), o.tokens.begin(), o.tokens.end());
    r.text += o.text;
    if (o.finished) {
      r.finish = o.finish_reason;
      break;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

struct Stats {
  double mean, median, min;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()), v[v.size() / 2], v.front()};
}

int main_impl(int argc, char** argv) {
  CLI::App app{"jump-forward against unconstrained decoding of the same token count (issue 44)"};
  std::string model = "tests/golden/llama-gqa-f32", backend = "cpu_avx2";
  int iterations = 20, max_tokens = 200;
  app.add_option("--model", model, "model folder")->check(CLI::ExistingDirectory);
  app.add_option("--backend", backend, "attention backend (both phases)");
  app.add_option("--iterations", iterations, "requests per arm")->check(CLI::Range(1, 1000));
  app.add_option("--max-tokens", max_tokens, "the constrained request's max_tokens")->check(CLI::Range(8, 400));
  bench::parse_or_exit(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(model);
  grammar::JsonGrammarOptions options;  // the server's defaults for response_format json_schema
  options.strict = true;
  const auto grammar = grammar::CompiledGrammar::compile(grammar::grammar_from_json_schema(kFixedKeys, options));
  Served jf(model, tok, backend, true), plain(model, tok, backend, false);

  // Each prompt's constrained token count, untimed (greedy: every run of it gives the same tokens).
  std::vector<size_t> num_tokens(std::size(kPrompts), 0);
  engine::SamplingParams constrained;
  constrained.temperature = 0.0f;
  constrained.max_tokens = max_tokens;
  constrained.grammar = grammar;
  for (size_t j = 0; j < std::size(kPrompts); ++j) {
    num_tokens[j] = run(*plain.engine, tok.encode(kPrompts[j], true), constrained).tokens.size();
  }
  std::vector<double> a, b, c;
  std::printf("iteration\tprompt\ttokens\tA_jump_forward_s\tB_unconstrained_s\tC_no_jump_forward_s\tfinish\n");
  for (int i = 0; i < iterations; ++i) {
    const size_t j = static_cast<size_t>(i) % std::size(kPrompts);
    const std::vector<TokenId> prompt = tok.encode(kPrompts[j], true);
    engine::SamplingParams free;
    free.temperature = 0.0f;
    free.ignore_eos = true;
    free.max_tokens = static_cast<int>(num_tokens[j]);
    // The arms' order rotates, so none always runs first (a warmer cache, a quieter moment).
    Response ra, rb, rc;
    for (int k = 0; k < 3; ++k) {
      switch ((i + k) % 3) {
        case 0: ra = run(*jf.engine, prompt, constrained); break;
        case 1: rb = run(*plain.engine, prompt, free); break;
        default: rc = run(*plain.engine, prompt, constrained); break;
      }
    }
    SPINDLE_CHECK(ra.tokens == rc.tokens, "iteration {}: jump-forward changed the tokens", i);
    SPINDLE_CHECK(rb.tokens.size() == ra.tokens.size(), "iteration {}: {} unconstrained tokens for {} constrained", i,
                  rb.tokens.size(), ra.tokens.size());
    a.push_back(ra.seconds);
    b.push_back(rb.seconds);
    c.push_back(rc.seconds);
    std::printf("%d\t%zu\t%zu\t%.4f\t%.4f\t%.4f\t%s\n", i, j, ra.tokens.size(), ra.seconds,
                rb.seconds, rc.seconds, ra.finish == engine::FinishReason::kStop ? "stop" : "length");
    if (i == 0) std::fprintf(stderr, "first constrained response: %s\n", ra.text.c_str());
  }
  const Stats sa = stats(a), sb = stats(b), sc = stats(c);
  const engine::MetricsSnapshot m = jf.metrics.snapshot();
  std::printf("\narm\tmean_s\tmedian_s\tmin_s\n");
  std::printf("A jump-forward\t%.4f\t%.4f\t%.4f\n", sa.mean, sa.median, sa.min);
  std::printf("B unconstrained ignore_eos\t%.4f\t%.4f\t%.4f\n", sb.mean, sb.median, sb.min);
  std::printf("C constrained, no jump-forward\t%.4f\t%.4f\t%.4f\n", sc.mean, sc.median, sc.min);
  std::printf("A/B of means %.3f (target < 1), A/C %.3f; jump-forward drafts %llu, accepted %llu\n", sa.mean / sb.mean,
              sa.mean / sc.mean, static_cast<unsigned long long>(m.jump_forward_draft_tokens_total),
              static_cast<unsigned long long>(m.jump_forward_accepted_tokens_total));
  jf.engine->stop();
  plain.engine->stop();
  return 0;
}

}  // namespace
}  // namespace spindle

int main(int argc, char** argv) {
  try {
    return spindle::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grammar_jump_forward: %s\n", e.what());
    return 1;
  }
}
