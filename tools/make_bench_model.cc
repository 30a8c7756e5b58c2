// make_bench_model DIR [--layers N] [--vocab V] [--hidden H] [--intermediate I] [--heads A]
// [--kv-heads K] [--head-dim D]: writes a random-weight bf16 Llama model into DIR, for benchmarks;
// by default of Llama-3.2-1B's shape (vocab 128256, hidden 2048, intermediate 8192, 16 layers,
// 32 heads over 8 KV heads, head_dim 64, tied embeddings; ~2.5 GB). bench_model_forward writes the same model
// into a temporary folder by itself; this tool is for keeping one around.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_model_writer.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s DIR [--layers N] [--vocab V] [--hidden H] [--intermediate I] [--heads A] [--kv-heads K] "
                 "[--head-dim D]\n",
                 argv[0]);
    return 2;
  }
  spindle::bench::BenchModelShape shape = spindle::bench::llama_3_2_1b_shape();
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--layers") shape.num_hidden_layers = value;
    else if (flag == "--vocab") shape.vocab_size = value;
    else if (flag == "--hidden") shape.hidden_size = value;
    else if (flag == "--intermediate") shape.intermediate_size = value;
    else if (flag == "--heads") shape.num_attention_heads = value;
    else if (flag == "--kv-heads") shape.num_key_value_heads = value;
    else if (flag == "--head-dim") shape.head_dim = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    const uint64_t bytes = spindle::bench::write_bench_model(argv[1], shape);
    std::printf("wrote %s: %.2f GB of bf16 weights\n", argv[1], bytes / 1e9);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
