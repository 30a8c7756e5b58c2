// make_bench_model DIR [--layers N] [--vocab V] [--hidden H] [--intermediate I] [--heads A]
// [--kv-heads K] [--head-dim D]: writes a random-weight bf16 Llama model into DIR, for benchmarks;
// by default of Llama-3.2-1B's shape (vocab 128256, hidden 2048, intermediate 8192, 16 layers,
// 32 heads over 8 KV heads, head_dim 64, tied embeddings; ~2.5 GB). bench_model_forward writes the same model
// into a temporary folder by itself; this tool is for keeping one around. Arguments are checked
// before anything is written (--help writes nothing); DIR must not name an existing file.
#include <cstdio>
#include <filesystem>
#include <string>

#include "bench_cli.h"
#include "bench_model_writer.h"

int main(int argc, char** argv) {
  spindle::bench::BenchModelShape shape = spindle::bench::llama_3_2_1b_shape();
  std::string dir;
  CLI::App app{"Write a random-weight bf16 Llama-shaped model folder for benchmarks", "make_bench_model"};
  app.add_option("dir", dir, "Output folder (created; files in it are overwritten)")
      ->required()
      ->check(CLI::Validator(
          [](const std::string& path) -> std::string {
            if (path.empty() || path.front() == '-') return "'" + path + "' looks like a flag, not a folder";
            if (std::filesystem::exists(path) && !std::filesystem::is_directory(path))
              return "'" + path + "' exists and is not a folder";
            return {};
          },
          "DIR"));
  app.add_option("--layers", shape.num_hidden_layers, "Decoder layers (16)")->check(CLI::Range(1, 1024));
  app.add_option("--vocab", shape.vocab_size, "Vocabulary size (128256)")->check(CLI::Range(1, 1 << 24));
  app.add_option("--hidden", shape.hidden_size, "Hidden size (2048)")->check(CLI::Range(1, 1 << 16));
  app.add_option("--intermediate", shape.intermediate_size, "MLP intermediate size (8192)")
      ->check(CLI::Range(1, 1 << 18));
  app.add_option("--heads", shape.num_attention_heads, "Attention heads (32)")->check(CLI::Range(1, 1024));
  app.add_option("--kv-heads", shape.num_key_value_heads, "KV heads, dividing --heads (8)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--head-dim", shape.head_dim, "Head dimension, even (64)")->check(CLI::Range(2, 1024));
  spindle::bench::parse_or_exit(app, argc, argv);
  if (shape.num_attention_heads % shape.num_key_value_heads != 0 || shape.head_dim % 2 != 0) {
    std::fprintf(stderr, "make_bench_model: --heads %d must be a multiple of --kv-heads %d and --head-dim %d even\n",
                 shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim);
    return 2;
  }
  try {
    const uint64_t bytes = spindle::bench::write_bench_model(dir, shape);
    std::printf("wrote %s: %.2f GB of bf16 weights\n", dir.c_str(), bytes / 1e9);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
