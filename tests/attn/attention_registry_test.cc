#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "attn/attention_backend.h"
#include "support/fake_machines.h"
#include "util/build_info.h"
#include "util/error.h"

namespace spindle::attn {
namespace {

using ::testing::HasSubstr;

AttentionShape shape_of(int heads, int kv_heads, int head_dim, DType dtype = DType::kBF16) {
  return {heads, kv_heads, head_dim, 0.125f, dtype, 16};
}

// Builds with CUDA also register cuda_flash, cuda_reference and cudnn_sdpa (attn/cuda_backends.cc).
TEST(AttentionRegistryTest, ListsBuiltinsSorted) {
  if (built_with_cuda()) {
    EXPECT_EQ(attention_registry().names(),
              (std::vector<std::string>{"cpu_amx", "cpu_avx2", "cpu_avx512", "cuda_flash", "cuda_reference",
                                                  "cudnn_sdpa", "reference"}));
  } else {
    EXPECT_EQ(attention_registry().names(),
              (std::vector<std::string>{"cpu_amx", "cpu_avx2", "cpu_avx512", "reference"}));
  }
}

TEST(AttentionRegistryTest, UnknownNameListsEveryRegisteredName) {
  try {
    attention_registry().get("flashinfer");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown attention backend 'flashinfer'"));
    EXPECT_THAT(e.what(), HasSubstr(built_with_cuda() ? "cpu_amx, cpu_avx2, cpu_avx512, cuda_flash, cuda_reference, cudnn_sdpa, reference"
                                                       : "cpu_amx, cpu_avx2, cpu_avx512, reference"));
  }
  EXPECT_THROW(create_attention_backend("nope", shape_of(4, 1, 64), {}), Error);
}

TEST(AttentionRegistryTest, DuplicateAndIncompleteRegistrationsFail) {
  AttentionRegistry r;
  register_cpu_attention_backends(r);
  BackendDescriptor again = r.get("reference");
  EXPECT_THROW(r.register_backend(again), Error);
  BackendDescriptor incomplete;
  incomplete.name = "x";
  EXPECT_THROW(r.register_backend(incomplete), Error);
}

TEST(AttentionRegistryTest, UnsupportedReasonsNameWhatIsMissing) {
  const auto& reg = attention_registry();
  const auto desktop = testing::avx2_machine();
  EXPECT_TRUE(reg.get("cpu_avx2").unsupported_reasons(desktop, shape_of(32, 8, 128)).empty());
  EXPECT_THAT(reg.get("cpu_avx512").unsupported_reasons(desktop, shape_of(32, 8, 128)),
              ::testing::Contains("cpu lacks avx512f"));
  for (const int dim : {16, 24, 40, 72, 136, 264, 512}) {
    for (const char* name : {"cpu_avx2", "cpu_avx512", "cpu_amx"}) {
      EXPECT_THAT(reg.get(name).unsupported_reasons(testing::sapphire_rapids_machine(true), shape_of(8, 2, dim)),
                  ::testing::Contains(fmt::format("head_dim {} not supported (multiples of 16 from 32 to 256)", dim)))
          << name;
    }
  }
  // Every size the kernel grid (tests/kernels/paged_attention_test.cc) validates is offered.
  for (int dim = 32; dim <= 256; dim += 16) {
    EXPECT_TRUE(reg.get("cpu_avx2").unsupported_reasons(desktop, shape_of(8, 2, dim)).empty()) << dim;
    for (const char* name : {"cpu_avx512", "cpu_amx"}) {
      EXPECT_TRUE(reg.get(name).unsupported_reasons(testing::sapphire_rapids_machine(true), shape_of(8, 2, dim)).empty())
          << name << " " << dim;
    }
  }
  EXPECT_THAT(reg.get("cpu_avx2").unsupported_reasons(desktop, shape_of(32, 8, 128, DType::kF16)),
              ::testing::Contains("KV dtype fp16 not supported (bf16, f32, fp8_e4m3)"));
  // Every CPU backend reads FP8 (fp8_e4m3) pages.
  EXPECT_TRUE(reg.get("cpu_avx2").unsupported_reasons(desktop, shape_of(32, 8, 128, DType::kF8E4M3)).empty());
  for (const char* name : {"reference", "cpu_avx512", "cpu_amx"}) {
    EXPECT_TRUE(reg.get(name)
                    .unsupported_reasons(testing::sapphire_rapids_machine(true), shape_of(32, 8, 128, DType::kF8E4M3))
                    .empty())
        << name;
  }
  // The reference runs on anything, any head_dim.
  EXPECT_TRUE(reg.get("reference").unsupported_reasons(testing::sse_only_machine(), shape_of(6, 3, 72)).empty());

  const auto denied = testing::sapphire_rapids_machine(/*amx_granted=*/false);
  const auto reasons = reg.get("cpu_amx").unsupported_reasons(denied, shape_of(32, 8, 128));
  ASSERT_FALSE(reasons.empty());
  EXPECT_THAT(reasons.front(), HasSubstr("amx_tile present but unusable"));
  EXPECT_THAT(reasons.front(), HasSubstr("arch_prctl"));
  EXPECT_TRUE(reg.get("cpu_avx512").unsupported_reasons(denied, shape_of(32, 8, 128)).empty());
  EXPECT_TRUE(reg.get("cpu_amx").unsupported_reasons(testing::sapphire_rapids_machine(true), shape_of(32, 8, 128)).empty());
}

TEST(AttentionRegistryTest, CreateChecksDpConfigAndShape) {
  EXPECT_THROW(create_attention_backend("reference", shape_of(4, 1, 64), {2, 2}), Error);
  EXPECT_THROW(create_attention_backend("reference", shape_of(6, 4, 64), {}), Error);
  auto b = create_attention_backend("reference", shape_of(4, 1, 64), {2, 1});
  EXPECT_EQ(b->name(), "reference");
}

}  // namespace
}  // namespace spindle::attn
