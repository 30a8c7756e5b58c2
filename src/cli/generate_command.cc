// spindle generate [MODEL_DIR] --prompt "..." [--prompt ...] [--chat] [sampling flags]: streams the
// continuation of one prompt (or prints those of several, queued under one lock) to stdout through the
// same engine the server uses, then prints prefill and decode tokens/s.
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
  std::vector<std::string> prompts;  // one: streamed; several: submitted at once, printed in order
  bool chat = false;
  std::string system;
  engine::SamplingParams sampling;
  int64_t seed = -1;
  bool print_stats = true;
};

// The prompt's token ids (wrapped in the chat template with --chat), checked against the context.
std::vector<TokenId> encode_prompt(const ServingStack& stack, const GenerateArgs& a, const std::string& prompt) {
  const auto& tok = *stack.tokenizer;
  std::vector<TokenId> ids;
  if (a.chat) {
    SPINDLE_CHECK(stack.chat_template.has_value(), "--chat: this model has no recognised chat template (use --chat-template)");
    std::vector<tokenizer::ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", prompt});
    ids = tok.encode(stack.chat_template->render(messages, true), /*add_special_tokens=*/false);
  } else {
    ids = tok.encode(prompt, /*add_special_tokens=*/true);
  }
  SPINDLE_CHECK(!ids.empty(), "the prompt is empty");
  const int max_len = stack.group->max_model_len();
  SPINDLE_CHECK(static_cast<int>(ids.size()) < max_len, "the prompt has {} tokens; the context is {}", ids.size(), max_len);
  return ids;
}

using Clock = std::chrono::steady_clock;

struct GenerateTiming {
  Clock::time_point start;
  std::optional<Clock::time_point> first;  // the first generated token of any prompt
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;
};

// Pops one stream to its end; streams its text to stdout when `echo`, else returns it.
std::string drain(engine::RequestStream& stream, bool echo, GenerateTiming& t, engine::FinishReason& finish) {
  std::string text;
  engine::RequestOutput out;
  do {
    out = stream.pop();
    if (out.finish_reason == engine::FinishReason::kError) SPINDLE_FAIL("generation failed: {}", out.error);
    if (!t.first && !out.tokens.empty()) t.first = Clock::now();
    if (echo) {
      fmt::print("{}", out.text);
      std::fflush(stdout);
    } else {
      text += out.text;
    }
  } while (!out.finished);
  t.num_output_tokens += out.num_output_tokens;
  finish = out.finish_reason;
  return text;
}

void print_stats(const GenerateTiming& t, size_t num_prompts, engine::FinishReason finish) {
  const auto end = Clock::now();
  const double prefill_s = std::chrono::duration<double>(*t.first - t.start).count();
  const double decode_s = std::chrono::duration<double>(end - *t.first).count();
  const int decoded = t.num_output_tokens - static_cast<int>(num_prompts);
  fmt::print(stderr, "prefill: {} tokens in {:.3f} s ({:.1f} tokens/s); decode: {} tokens in {:.3f} s ({:.1f} tokens/s); "
             "finish: {}\n",
             t.num_prompt_tokens, prefill_s, t.num_prompt_tokens / prefill_s, decoded, decode_s,
             decoded > 0 ? decoded / decode_s : 0.0, engine::finish_reason_name(finish));
}

void run_generate(GenerateArgs& a) {
  auto stack = build_serving_stack(a.serving);
  log_serving_stack(*stack);
  std::vector<std::vector<TokenId>> prompts;
  for (const auto& p : a.prompts) prompts.push_back(encode_prompt(*stack, a, p));
  if (a.seed >= 0) a.sampling.seed = static_cast<uint64_t>(a.seed);
  const int max_len = stack->group->max_model_len();
  GenerateTiming t{.start = Clock::now()};
  std::vector<engine::Submission> batch;
  for (auto& ids : prompts) {
    engine::SamplingParams sampling = a.sampling;
    sampling.max_tokens = std::min(sampling.max_tokens, max_len - static_cast<int>(ids.size()));
    engine::validate_sampling_params(sampling, stack->tokenizer->vocab_size());
    t.num_prompt_tokens += static_cast<int>(ids.size());
    batch.push_back({std::move(ids), std::move(sampling)});
  }
  // All at once (one lock): the engine's first step sees every prompt, whatever the threads' timing.
  const std::vector<std::shared_ptr<engine::RequestStream>> streams = stack->group->submit_batch(std::move(batch));
  const bool one = streams.size() == 1;
  engine::FinishReason finish = engine::FinishReason::kNone;
  for (size_t i = 0; i < streams.size(); ++i) {
    if (one && !a.chat) fmt::print("{}", a.prompts[i]);
    if (!one) fmt::print("[{}] {}", i, a.chat ? "" : a.prompts[i]);
    const std::string text = drain(*streams[i], one, t, finish);
    fmt::print("{}\n", text);
    std::fflush(stdout);
  }
  if (a.print_stats && t.first) print_stats(t, streams.size(), finish);
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
  cmd->add_option("--prompt,-p", a->prompts, "The prompt (repeatable: several are submitted at once and printed in order)")->required();
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
