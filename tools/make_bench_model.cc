// make_bench_model DIR [--layers N]: writes a random-weight bf16 model of Llama-3.2-1B's shape
// (vocab 128256, hidden 2048, intermediate 8192, 16 layers, 32 heads over 8 KV heads, head_dim 64,
// tied embeddings; ~2.5 GB) into DIR, for benchmarks. bench_model_forward writes the same model
// into a temporary folder by itself; this tool is for keeping one around.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_model_writer.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--layers N]\n", argv[0]);
    return 2;
  }
  spindle::bench::BenchModelShape shape = spindle::bench::llama_3_2_1b_shape();
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--layers") shape.num_hidden_layers = std::atoi(argv[i + 1]);
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
