// Pins every resolved default for a few fake machines. Expected values are written by hand: moving
// code around must not silently change a default.
#include "config/server_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "model/model_config.h"
#include "support/fake_machines.h"
#include "util/error.h"

namespace spindle::config {
namespace {

const ModelAttentionDims kLlama8B{32, 8, 128};
const ModelAttentionDims kQwen05B{14, 2, 64};

// kjv-tiny's attention shape, vocabulary and context (models/kjv-tiny/config.json).
ModelConfig kjv_tiny_shape() {
  ModelConfig m;
  m.num_attention_heads = 6;
  m.num_key_value_heads = 2;
  m.head_dim = 64;
  m.vocab_size = 4096;
  m.max_position_embeddings = 512;
  return m;
}

TEST(ServerConfigTest, DefaultsOnAnAvx2Desktop) {
  const ResolvedConfig r = resolve({}, testing::avx2_machine(8), kLlama8B);
  EXPECT_EQ(r.kv_dtype, DType::kBF16);
  EXPECT_EQ(r.page_size, 16);
  EXPECT_EQ(r.num_threads, 8);
  EXPECT_EQ(r.attention_shape.num_heads, 32);
  EXPECT_EQ(r.attention_shape.num_kv_heads, 8);
  EXPECT_EQ(r.attention_shape.head_dim, 128);
  EXPECT_FLOAT_EQ(r.attention_shape.scale, 0.08838834764831845f);  // 1/sqrt(128)
  EXPECT_EQ(r.attention_shape.kv_dtype, DType::kBF16);
  EXPECT_EQ(r.attention_shape.page_size, 16);
  EXPECT_EQ(r.attention.attention_backend, "auto");
  EXPECT_EQ(r.attention.prefill_attention_backend, "auto");
  EXPECT_EQ(r.attention.decode_attention_backend, "auto");
  EXPECT_EQ(r.attention.policy, attn::BackendPolicy::kBenchmark);
  EXPECT_FALSE(r.attention.skip_validation);
  EXPECT_EQ(r.attention.device, attn::Device::kCpu);
  EXPECT_EQ(r.backend_validation_timeout_s, 30.0);
  EXPECT_TRUE(r.use_backend_cache);
  EXPECT_FALSE(r.bf16_activations);  // exact f32 matrix products unless asked
}

TEST(ServerConfigTest, DefaultsOnAnAmxServer) {
  const ResolvedConfig r = resolve({}, testing::sapphire_rapids_machine(true, 56), kQwen05B);
  EXPECT_FALSE(r.bf16_activations);  // even where AMX would make bf16 matmuls fast
  EXPECT_EQ(r.kv_dtype, DType::kBF16);
  EXPECT_EQ(r.page_size, 16);
  EXPECT_EQ(r.num_threads, 56);
  EXPECT_FLOAT_EQ(r.attention_shape.scale, 0.125f);  // 1/sqrt(64)
  EXPECT_EQ(r.attention.policy, attn::BackendPolicy::kBenchmark);
  EXPECT_EQ(r.backend_validation_timeout_s, 30.0);
}

TEST(ServerConfigTest, DefaultsOnAnAmxDeniedServerAreTheSame) {
  const ResolvedConfig r = resolve({}, testing::sapphire_rapids_machine(false, 32), kLlama8B);
  EXPECT_EQ(r.kv_dtype, DType::kBF16);
  EXPECT_EQ(r.page_size, 16);
  EXPECT_EQ(r.num_threads, 32);
}

TEST(ServerConfigTest, AutoMatmulPrecisionFollowsTheCheckpointDtype) {
  ModelConfig m;
  m.num_attention_heads = 32;
  m.num_key_value_heads = 8;
  m.head_dim = 128;
  m.hidden_size = 4096;
  m.max_position_embeddings = 8192;
  m.torch_dtype = DType::kBF16;
  EXPECT_TRUE(resolve({}, testing::avx2_machine(8), m).bf16_activations);  // as HF computes a bf16 checkpoint
  m.torch_dtype = DType::kF32;
  EXPECT_FALSE(resolve({}, testing::avx2_machine(8), m).bf16_activations);
  m.torch_dtype = DType::kBF16;
  ServerConfig exact;
  exact.matmul_precision = "exact";
  EXPECT_FALSE(resolve(exact, testing::avx2_machine(8), m).bf16_activations);
}

TEST(ServerConfigTest, FlagsOverrideDefaults) {
  ServerConfig f;
  f.kv_cache_dtype = "f32";
  f.page_size = 1;
  f.num_threads = 3;
  f.attention_backend_policy = "priority";
  f.no_backend_cache = true;
  f.matmul_precision = "bf16";
  const ResolvedConfig r = resolve(f, testing::avx2_machine(8), kLlama8B);
  EXPECT_TRUE(r.bf16_activations);
  EXPECT_EQ(r.kv_dtype, DType::kF32);
  EXPECT_EQ(r.attention_shape.kv_dtype, DType::kF32);
  EXPECT_EQ(r.page_size, 1);
  EXPECT_EQ(r.num_threads, 3);
  EXPECT_EQ(r.attention.policy, attn::BackendPolicy::kPriority);
  EXPECT_FALSE(r.use_backend_cache);
}

// --kv-cache-dtype fp8_e4m3 (and vLLM's spelling fp8): one byte per element, in the attention shape.
TEST(ServerConfigTest, Fp8KvCache) {
  for (const char* name : {"fp8_e4m3", "fp8"}) {
    ServerConfig f;
    f.kv_cache_dtype = name;
    const ResolvedConfig r = resolve(f, testing::avx2_machine(8), kLlama8B);
    EXPECT_EQ(r.kv_dtype, DType::kF8E4M3) << name;
    EXPECT_EQ(r.attention_shape.kv_dtype, DType::kF8E4M3) << name;
    EXPECT_FALSE(r.calibrate_kv_scales);
  }
  ServerConfig f;
  f.kv_cache_dtype = "fp8_e4m3";
  f.kv_cache_scales = "auto";
  EXPECT_TRUE(resolve(f, testing::avx2_machine(8), kLlama8B).calibrate_kv_scales);
}

TEST(ServerConfigTest, BadFlagsAreClearErrors) {
  ServerConfig f;
  // An unknown KV dtype, and a known dtype the KV cache does not take: the error names the flag and
  // lists what it takes.
  for (const char* bad : {"fp8_e5m2", "int8", "q8_0"}) {
    f.kv_cache_dtype = bad;
    EXPECT_THAT([&] { resolve(f, testing::avx2_machine(), kLlama8B); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr(
                    std::string("--kv-cache-dtype '") + bad + "' is not supported; use auto, bf16, fp16, f32 or fp8_e4m3")));
  }
  f = {};
  f.kv_cache_scales = "absmax";
  EXPECT_THAT([&] { resolve(f, testing::avx2_machine(), kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--kv-cache-scales 'absmax' is not supported")));
  f = {};
  f.kv_cache_scales = "auto";  // with the default bf16 KV
  EXPECT_THAT([&] { resolve(f, testing::avx2_machine(), kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("it needs --kv-cache-dtype fp8_e4m3 (got bf16)")));
  f = {};
  f.matmul_precision = "fp8";
  EXPECT_THAT([&] { resolve(f, testing::avx2_machine(), kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--matmul-precision 'fp8'")));
  f = {};
  f.page_size = 512;
  EXPECT_THROW(resolve(f, testing::avx2_machine(), kLlama8B), Error);
  f = {};
  f.attention_backend_policy = "fastest";
  EXPECT_THAT([&] { resolve(f, testing::avx2_machine(), kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("benchmark, priority")));
  EXPECT_THROW(resolve({}, testing::avx2_machine(), {6, 4, 64}), Error);
}

TEST(ServerConfigTest, DeviceFlag) {
  EXPECT_EQ(parse_device("cpu"), std::make_pair(attn::Device::kCpu, -1));
  EXPECT_EQ(parse_device("cuda"), std::make_pair(attn::Device::kCuda, 0));
  EXPECT_EQ(parse_device("cuda:3"), std::make_pair(attn::Device::kCuda, 3));
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA:0"}) {
    EXPECT_THAT([&] { parse_device(bad); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("cpu, cuda, cuda:N"))) << bad;
  }

  ServerConfig f;
  f.device = "cuda:1";
  DeviceInfo no_gpu = testing::avx2_machine();
  no_gpu.cuda_status = "no CUDA driver: stub";
  EXPECT_THAT([&] { resolve(f, no_gpu, kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--device cuda:1: no usable CUDA device (no CUDA driver: stub)")));

  DeviceInfo one_gpu = testing::avx2_machine();
  one_gpu.cuda_devices.push_back({0, "NVIDIA H200", 9, 0, 132, 141ull << 30, 140ull << 30});
  EXPECT_THAT([&] { resolve(f, one_gpu, kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("this machine has CUDA devices 0 to 0")));
  f.device = "cuda:0";
  const ResolvedConfig r = resolve(f, one_gpu, kLlama8B);
  EXPECT_EQ(r.device, attn::Device::kCuda);
  EXPECT_EQ(r.cuda_device, 0);
  EXPECT_EQ(r.attention.device, attn::Device::kCuda);
  EXPECT_EQ(resolve({}, one_gpu, kLlama8B).device, attn::Device::kCpu);
}

// The overlap schedule: off by default (CUDA too), on with --enable-overlap-schedule on CUDA only;
// the two flags exclude each other on the command line.
TEST(ServerConfigTest, OverlapScheduleIsOptIn) {
  DeviceInfo one_gpu = testing::avx2_machine();
  one_gpu.cuda_devices.push_back({0, "NVIDIA H200", 9, 0, 132, 141ull << 30, 140ull << 30});
  ServerConfig f;
  f.device = "cuda:0";
  EXPECT_FALSE(resolve(f, one_gpu, kLlama8B).overlap_schedule);
  f.enable_overlap_schedule = true;
  EXPECT_TRUE(resolve(f, one_gpu, kLlama8B).overlap_schedule);
  f.device = "cpu";
  EXPECT_FALSE(resolve(f, one_gpu, kLlama8B).overlap_schedule);  // the CPU samples on the host

  CLI::App app;
  ServerConfig parsed;
  add_scheduler_flags(app, parsed);
  EXPECT_THROW(app.parse(std::vector<std::string>{"--disable-overlap-schedule", "--enable-overlap-schedule"}),
               CLI::ExcludesError);
}

// --weights-memory: auto copies the weights into huge pages on the CPU where the kernel grants
// them on advice (THP always or madvise), maps the file where it does not (never, or no THP) and
// on CUDA; mapped and huge-pages are taken as given on the CPU; huge-pages on CUDA, or another
// word, is an error naming the flag.
TEST(ServerConfigTest, WeightsMemory) {
  DeviceInfo machine = testing::avx2_machine(8);
  machine.memory.transparent_hugepage = "madvise";
  ServerConfig f;
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kHugePageCopy);
  machine.memory.transparent_hugepage = "always";
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kHugePageCopy);
  machine.memory.transparent_hugepage = "never";
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kMapped);
  machine.memory.transparent_hugepage = "unavailable";
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kMapped);
  f.weights_memory = "huge-pages";
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kHugePageCopy);
  machine.memory.transparent_hugepage = "madvise";
  f.weights_memory = "mapped";
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kMapped);

  machine.cuda_devices.push_back({0, "NVIDIA H200", 9, 0, 132, 141ull << 30, 140ull << 30});
  f.device = "cuda:0";
  f.weights_memory = "auto";
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kMapped);
  f.weights_memory = "huge-pages";
  EXPECT_THAT([&] { resolve(f, machine, kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--weights-memory huge-pages is for the CPU")));
  f.device = "cpu";
  f.weights_memory = "hugetlb";
  EXPECT_THAT([&] { resolve(f, machine, kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--weights-memory 'hugetlb' is not one of")));
}

// --quantization: none by default; q8_0 on the CPU (and then weights_memory auto maps the file:
// the repacked Q8_0 copies replace the plain linears a huge-page copy would hold); q8_0 on CUDA, or
// another word, is an error naming the flag (and, for a word, the values).
TEST(ServerConfigTest, Quantization) {
  DeviceInfo machine = testing::avx2_machine(8);
  machine.memory.transparent_hugepage = "always";
  ServerConfig f;
  EXPECT_EQ(resolve(f, machine, kLlama8B).quantization, WeightQuantization::kNone);
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kHugePageCopy);
  f.quantization = "q8_0";
  EXPECT_EQ(resolve(f, machine, kLlama8B).quantization, WeightQuantization::kQ8_0);
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kMapped);
  f.weights_memory = "huge-pages";
  EXPECT_EQ(resolve(f, machine, kLlama8B).weights_memory, FileMemory::kHugePageCopy);
  f.quantization = "q4";
  EXPECT_THAT([&] { resolve(f, machine, kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--quantization 'q4' is not one of: none, q8_0")));
  EXPECT_THAT([] { resolve_quantization("q8_0", attn::Device::kCuda); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--quantization q8_0 is for the CPU device")));
  EXPECT_EQ(resolve_quantization("none", attn::Device::kCuda), WeightQuantization::kNone);
}

// --fp8-prefill-kernel: auto by default, passed through on CUDA; the CPU resolves it to fp8_w8a16 (its
// only FP8 product), and a CUDA entry named on the CPU is an error naming the flag.
TEST(ServerConfigTest, Fp8PrefillKernel) {
  DeviceInfo machine = testing::avx2_machine(8);
  ServerConfig f;
  EXPECT_EQ(resolve(f, machine, kLlama8B).fp8_prefill_kernel, "fp8_w8a16");
  machine.cuda_devices.push_back({0, "NVIDIA H100", 9, 0, 132, 80ull << 30, 79ull << 30});
  f.device = "cuda:0";
  EXPECT_EQ(resolve(f, machine, kLlama8B).fp8_prefill_kernel, "auto");
  f.device = "cpu";
  f.fp8_prefill_kernel = "cublaslt_fp8";
  EXPECT_THAT([&] { resolve(f, machine, kLlama8B); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--fp8-prefill-kernel cublaslt_fp8 is for the CUDA")));
  f.device = "cuda:0";
  EXPECT_EQ(resolve(f, machine, kLlama8B).fp8_prefill_kernel, "cublaslt_fp8");
}

// --max-mixed-prefill-tokens: 0 (no cap of its own) unless given; it must fit in
// --max-num-batched-tokens, and a negative one is an error naming the flag.
TEST(ServerConfigTest, MixedPrefillTokens) {
  const ModelConfig m = kjv_tiny_shape();
  ServerConfig f;
  EXPECT_EQ(resolve(f, testing::avx2_machine(8), m).kv.max_mixed_prefill_tokens, 0);
  f.kv.max_mixed_prefill_tokens = 256;
  EXPECT_EQ(resolve(f, testing::avx2_machine(8), m).kv.max_mixed_prefill_tokens, 256);
  f.kv.max_mixed_prefill_tokens = 4096;
  EXPECT_THAT([&] { resolve(f, testing::avx2_machine(8), m); },
              ::testing::ThrowsMessage<Error>(
                  ::testing::HasSubstr("--max-mixed-prefill-tokens 4096 exceeds --max-num-batched-tokens 2048")));
  f.kv.max_num_batched_tokens = 8192;
  EXPECT_EQ(resolve(f, testing::avx2_machine(8), m).kv.max_mixed_prefill_tokens, 4096);
  f.kv.max_mixed_prefill_tokens = -1;
  EXPECT_THAT([&] { resolve(f, testing::avx2_machine(8), m); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--max-mixed-prefill-tokens -1 must be positive")));
}

// --speculative-draft-vocab-size: auto is 37.5% of the vocabulary, at least 1024 ids (all of a
// smaller one), on the CPU; the whole vocabulary on CUDA; an explicit value is kept; a bad one
// names the flag.
TEST(ServerConfigTest, DraftVocabSize) {
  EXPECT_EQ(default_draft_vocab_size(4096), 1536);
  EXPECT_EQ(default_draft_vocab_size(128256), 48096);
  EXPECT_EQ(default_draft_vocab_size(2000), 1024);
  EXPECT_EQ(default_draft_vocab_size(600), 600);
  const ModelConfig m = kjv_tiny_shape();
  ServerConfig f;
  f.spec.algorithm = "draft";
  f.spec.draft_model_path = std::string(SPINDLE_FIXTURES_DIR) + "/../../models/kjv-draft";
  EXPECT_EQ(resolve(f, testing::avx2_machine(8), m).spec.draft_vocab_size, 1536);
  f.spec.draft_vocab_size = 4096;
  EXPECT_EQ(resolve(f, testing::avx2_machine(8), m).spec.draft_vocab_size, 4096);
  f.spec.draft_vocab_size = 17;
  EXPECT_EQ(resolve(f, testing::avx2_machine(8), m).spec.draft_vocab_size, 17);
  f.spec.draft_vocab_size = 4097;
  EXPECT_THAT([&] { resolve(f, testing::avx2_machine(8), m); },
              ::testing::ThrowsMessage<Error>(
                  ::testing::HasSubstr("--speculative-draft-vocab-size 4097: the vocabulary has only 4096 token ids")));
  f.spec.draft_vocab_size = -5;
  EXPECT_THAT([&] { resolve(f, testing::avx2_machine(8), m); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--speculative-draft-vocab-size -5: expected")));
  DeviceInfo one_gpu = testing::avx2_machine();
  one_gpu.cuda_devices.push_back({0, "NVIDIA H200", 9, 0, 132, 141ull << 30, 140ull << 30});
  f.device = "cuda";
  f.spec.draft_vocab_size = 0;
  EXPECT_EQ(resolve(f, one_gpu, m).spec.draft_vocab_size, 4096);
  f.spec.draft_vocab_size = 1000;
  EXPECT_THAT([&] { resolve(f, one_gpu, m); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--speculative-draft-vocab-size 1000: a draft "
                                                                   "vocabulary subset is only available on the CPU")));
  ServerConfig ngram;
  ngram.spec.algorithm = "ngram";
  ngram.spec.draft_vocab_size = 100;
  EXPECT_THAT([&] { resolve(ngram, testing::avx2_machine(8), m); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr(
                  "--speculative-draft-vocab-size is given but --speculative-algorithm is not draft")));
  ngram.spec.draft_vocab_size = 0;
  EXPECT_EQ(resolve(ngram, testing::avx2_machine(8), m).spec.draft_vocab_size, 0);
}

}  // namespace
}  // namespace spindle::config
