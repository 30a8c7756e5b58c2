// spindle generate [MODEL_DIR] --prompt "..." [--chat] [sampling flags]: streams the continuation
// to stdout through the same engine the server uses, then prints prefill and decode tokens/s.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/serving_stack.h"
#include "util/error.h"

namespace spindle::cli {
namespace {

struct GenerateArgs {
  ServingFlags serving;
  std::string prompt;
  bool chat = false;
  std::string system;
  engine::SamplingParams sampling;
  int64_t seed = -1;
  bool print_stats = true;
};

void run_generate(GenerateArgs& a) {
  auto stack = build_serving_stack(a.serving);
  log_serving_stack(*stack);
  const auto& tok = *stack->tokenizer;
  std::vector<TokenId> ids;
  if (a.chat) {
    SPINDLE_CHECK(stack->chat_template.has_value(), "--chat: this model has no recognised chat template (use --chat-template)");
    std::vector<tokenizer::ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", a.prompt});
    ids = tok.encode(stack->chat_template->render(messages, true), /*add_special_tokens=*/false);
  } else {
    ids = tok.encode(a.prompt, /*add_special_tokens=*/true);
  }
  SPINDLE_CHECK(!ids.empty(), "the prompt is empty");
  const int max_len = stack->group->max_model_len();
  SPINDLE_CHECK(static_cast<int>(ids.size()) < max_len, "the prompt has {} tokens; the context is {}", ids.size(), max_len);
  if (a.seed >= 0) a.sampling.seed = static_cast<uint64_t>(a.seed);
  a.sampling.max_tokens = std::min(a.sampling.max_tokens, max_len - static_cast<int>(ids.size()));
  engine::validate_sampling_params(a.sampling, tok.vocab_size());

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const int num_prompt = static_cast<int>(ids.size());
  auto stream = stack->group->submit(std::move(ids), a.sampling);
  std::optional<Clock::time_point> first;
  engine::RequestOutput out;
  if (!a.chat) fmt::print("{}", a.prompt);
  do {
    out = stream->pop();
    if (out.finish_reason == engine::FinishReason::kError) SPINDLE_FAIL("generation failed: {}", out.error);
    if (!first && !out.tokens.empty()) first = Clock::now();
    fmt::print("{}", out.text);
    std::fflush(stdout);
  } while (!out.finished);
  const auto end = Clock::now();
  fmt::print("\n");
  std::fflush(stdout);
  if (a.print_stats && first) {
    const double prefill_s = std::chrono::duration<double>(*first - start).count();
    const double decode_s = std::chrono::duration<double>(end - *first).count();
    const int decoded = out.num_output_tokens - 1;
    fmt::print(stderr, "prefill: {} tokens in {:.3f} s ({:.1f} tokens/s); decode: {} tokens in {:.3f} s ({:.1f} tokens/s); "
               "finish: {}\n",
               num_prompt, prefill_s, num_prompt / prefill_s, decoded, decode_s, decoded > 0 ? decoded / decode_s : 0.0,
               engine::finish_reason_name(out.finish_reason));
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  a->sampling.max_tokens = 64;
  // One prompt and gone: the copy into huge pages (0.5-0.9 s for 2.5 GB) would cost more than its
  // ~5% faster decode saves, and generate's start is the one users time.
  a->serving.server.weights_memory = "mapped";
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  add_serving_flags(*cmd, a->serving);
  cmd->add_option("--prompt,-p", a->prompt, "The prompt")->required();
  cmd->add_flag("--chat", a->chat, "Wrap the prompt as a user message in the model's chat template");
  cmd->add_option("--system", a->system, "System message (with --chat)");
  cmd->add_option("--max-tokens,-n", a->sampling.max_tokens, "Tokens to generate at most (64)");
  cmd->add_option("--temperature", a->sampling.temperature, "0 = greedy (1.0)");
  cmd->add_option("--top-p", a->sampling.top_p, "Nucleus sampling mass (1.0)");
  cmd->add_option("--top-k", a->sampling.top_k, "Sample among the k most likely (0 = off)");
  cmd->add_option("--min-p", a->sampling.min_p, "Drop tokens below min-p x the top probability (0)");
  cmd->add_option("--repetition-penalty", a->sampling.repetition_penalty, "HF-style repetition penalty (1.0)");
  cmd->add_option("--presence-penalty", a->sampling.presence_penalty, "OpenAI presence penalty (0)");
  cmd->add_option("--frequency-penalty", a->sampling.frequency_penalty, "OpenAI frequency penalty (0)");
  cmd->add_option("--seed", a->seed, "Sampling seed (same seed, same text)");
  cmd->add_option("--stop", a->sampling.stop, "Stop string (repeatable)");
  cmd->add_flag("--ignore-eos", a->sampling.ignore_eos, "Keep going past end-of-sequence tokens");
  cmd->add_flag("!--no-stats", a->print_stats, "Do not print tokens/s");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace spindle::cli
