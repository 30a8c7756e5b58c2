// The capacity planner against hand-computed plans (DESIGN.md section 3), the KV config glue
// (defaults, layout, workspace estimate) and the budgets of the cgroup fixtures.
//
// The rule under test (kv/capacity_planner.h):
//   reserve          = max(128 MiB, usable / 50)
//   budget           = usable - weights - dp * workspace - reserve
//   kv per rank      = floor(budget * mem_fraction / dp)
//   pages per rank   = floor(kv per rank / (kv_bytes_per_token * page_size))
//   max_total_tokens = pages * page_size;  sequences = pages / ceil(max_model_len / page_size)
// Every expected number below is worked out by hand in the comment beside it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "config/kv_config.h"
#include "startup/kv_planning.h"
#include "kv/capacity_planner.h"
#include "model/model_config.h"
#include "model/weight_map.h"
#include "platform/memory_info.h"
#include "util/error.h"

namespace spindle::kv {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = SPINDLE_FIXTURES_DIR;

ModelConfig fixture_model(const std::string& name) { return load_model_config(kFixtures + "/models/" + name); }

// A Llama-2-7B-shaped MHA model (32 KV heads = 32 heads): none of the fixtures is MHA.
ModelConfig mha_model() {
  return parse_model_config(nlohmann::json{{"architectures", {"LlamaForCausalLM"}},
                                           {"hidden_size", 4096},
                                           {"intermediate_size", 11008},
                                           {"num_hidden_layers", 32},
                                           {"num_attention_heads", 32},
                                           {"num_key_value_heads", 32},
                                           {"vocab_size", 32000},
                                           {"max_position_embeddings", 4096},
                                           {"torch_dtype", "bfloat16"}},
                            "mha config");
}

MemoryInfo memory_of(uint64_t usable, const std::string& bound = "MemAvailable") {
  MemoryInfo m;
  m.usable_bytes = usable;
  m.bound = bound;
  return m;
}

// Plans a model with the defaults (bf16 KV, page 16, mem fraction 0.90, 2048 batched tokens,
// max_model_len = max_position_embeddings, auto) plus the given flags.
KvPlan plan_for(const ModelConfig& model, const MemoryInfo& memory, uint64_t weight_bytes,
                const config::KvFlags& flags = {}) {
  const auto kv = config::resolve_kv(flags, model);
  const auto layout = startup::kv_layout_for(model, DType::kBF16, 16);
  return startup::plan_kv_cache(kv, layout, model, memory, weight_bytes);
}

constexpr uint64_t k32GiB = 34'359'738'368;      // 32 * 2^30
constexpr uint64_t kReserve32GiB = 687'194'767;  // floor(34359738368 / 50) = floor(687194767.36) > 128 MiB

struct ArchCase {
  std::string fixture;
  uint64_t num_parameters;      // by hand, checked against parameter_count
  uint64_t kv_bytes_per_token;  // layers * 2 * kv_heads * head_dim * 2 (bf16)
  uint64_t workspace_bytes;     // 2048 * 4 * (3H + 2Q + 2K + 2I + V)
  uint64_t budget_bytes;        // 32 GiB - 2 * params - workspace - reserve
  uint64_t kv_bytes_per_rank;   // floor(budget * 0.9)
  int num_pages;                // floor(kv / (kv_bytes_per_token * 16))
  int64_t num_sequences;        // pages / ceil(max_position_embeddings / 16)
};

// Llama-3.2-1B: H 2048, I 8192, 16 layers, 32 heads, 8 KV heads, head_dim 64, V 128256, tied.
//   params  = V*H 262668288 + 16 * (q 2048*2048 + k 512*2048 + v 512*2048 + o 2048*2048
//             + mlp 3*8192*2048 + norms 2*2048 = 60821504) + norm 2048 = 1235814400
//   kv/tok  = 16 * 2 * 8 * 64 * 2 = 32768
//   ws      = 2048 * 4 * (6144 + 4096 + 1024 + 16384 + 128256 = 155904) = 1277165568
//   budget  = 34359738368 - 2471628800 - 1277165568 - 687194767 = 29923749233
//   kv      = floor(29923749233 * 0.9) = floor(26931374309.7) = 26931374309
//   pages   = floor(26931374309 / 524288) = 51367 (821872 tokens); seq 131072 = 8192 pages -> 6
// Qwen2.5-0.5B: H 896, I 4864, 24 layers, 14 heads, 2 KV heads, head_dim 64, V 151936, tied, qkv bias.
//   params  = V*H 136134656 + 24 * (q 896*896 + k 128*896 + v 128*896 + o 896*896 + mlp 3*4864*896
//             + norms 2*896 + bias 896+128+128 = 14912384) + 896 = 494032768
//   kv/tok  = 24 * 2 * 2 * 64 * 2 = 12288
//   ws      = 2048 * 4 * (2688 + 1792 + 256 + 9728 + 151936 = 166400) = 1363148800
//   budget  = 34359738368 - 988065536 - 1363148800 - 687194767 = 31321329265
//   kv      = floor(31321329265 * 0.9) = floor(28189196338.5) = 28189196338
//   pages   = floor(28189196338 / 196608) = 143377 (2294032 tokens); seq 32768 = 2048 pages -> 70
// Qwen3-0.6B: H 1024, I 3072, 28 layers, 16 heads, 8 KV heads, head_dim 128, V 151936, tied, qk norm.
//   params  = V*H 155582464 + 28 * (q 2048*1024 + k 1024*1024 + v 1024*1024 + o 1024*2048
//             + mlp 3*3072*1024 + norms 2*1024 + qk norms 2*128 = 15730944) + 1024 = 596049920
//   kv/tok  = 28 * 2 * 8 * 128 * 2 = 114688
//   ws      = 2048 * 4 * (3072 + 4096 + 2048 + 6144 + 151936 = 167296) = 1370488832
//   budget  = 34359738368 - 1192099840 - 1370488832 - 687194767 = 31109954929
//   kv      = floor(31109954929 * 0.9) = floor(27998959436.1) = 27998959436
//   pages   = floor(27998959436 / 1835008) = 15258 (244128 tokens); seq 40960 = 2560 pages -> 5
// Mistral-7B-v0.3: H 4096, I 14336, 32 layers, 32 heads, 8 KV heads, head_dim 128, V 32768, untied.
//   params  = 2 * V*H 268435456 + 32 * (q 4096*4096 + k 1024*4096 + v 1024*4096 + o 4096*4096
//             + mlp 3*14336*4096 + norms 2*4096 = 218112000) + 4096 = 7248023552
//   kv/tok  = 32 * 2 * 8 * 128 * 2 = 131072
//   ws      = 2048 * 4 * (12288 + 8192 + 2048 + 28672 + 32768 = 83968) = 687865856
//   budget  = 34359738368 - 14496047104 - 687865856 - 687194767 = 18488630641
//   kv      = floor(18488630641 * 0.9) = floor(16639767576.9) = 16639767576
//   pages   = floor(16639767576 / 2097152) = 7934 (126944 tokens); seq 32768 = 2048 pages -> 3
const ArchCase kArchCases[] = {
    {"llama-3.2-1b", 1235814400, 32768, 1277165568, 29923749233, 26931374309, 51367, 6},
    {"qwen2.5-0.5b", 494032768, 12288, 1363148800, 31321329265, 28189196338, 143377, 70},
    {"qwen3-0.6b", 596049920, 114688, 1370488832, 31109954929, 27998959436, 15258, 5},
    {"mistral-7b-v0.3", 7248023552, 131072, 687865856, 18488630641, 16639767576, 7934, 3},
};

TEST(CapacityPlannerTest, FourArchitecturesOn32GiB) {
  for (const ArchCase& c : kArchCases) {
    SCOPED_TRACE(c.fixture);
    const ModelConfig model = fixture_model(c.fixture);
    ASSERT_EQ(parameter_count(model), c.num_parameters);
    ASSERT_EQ(startup::kv_layout_for(model, DType::kBF16, 16).bytes_per_token(), c.kv_bytes_per_token);
    ASSERT_EQ(startup::estimate_workspace_bytes(model, 2048), c.workspace_bytes);

    const KvPlan p = plan_for(model, memory_of(k32GiB), 2 * c.num_parameters);
    EXPECT_EQ(p.usable_bytes, k32GiB);
    EXPECT_EQ(p.usable_bound, "MemAvailable");
    EXPECT_EQ(p.weight_bytes, 2 * c.num_parameters);
    EXPECT_EQ(p.workspace_bytes, c.workspace_bytes);
    EXPECT_EQ(p.workspace_source, "estimated");
    EXPECT_EQ(p.reserve_bytes, kReserve32GiB);
    EXPECT_EQ(p.budget_bytes, c.budget_bytes);
    EXPECT_EQ(p.kv_budget_bytes_per_rank, c.kv_bytes_per_rank);
    EXPECT_EQ(p.kv_bytes_per_token, c.kv_bytes_per_token);
    EXPECT_EQ(p.num_pages_per_rank, c.num_pages);
    EXPECT_EQ(p.max_total_tokens, int64_t{c.num_pages} * 16);
    EXPECT_EQ(p.auto_max_total_tokens, p.max_total_tokens);
    EXPECT_FALSE(p.explicit_max_total_tokens);
    EXPECT_EQ(p.kv_bytes_per_rank, uint64_t(c.num_pages) * c.kv_bytes_per_token * 16);
    EXPECT_EQ(p.num_sequences_per_rank, c.num_sequences);
    ASSERT_EQ(p.ranks.size(), 1u);
    EXPECT_EQ(p.ranks[0].first_page, 0);
    EXPECT_EQ(p.ranks[0].num_pages, c.num_pages);
  }
}

TEST(CapacityPlannerTest, MhaModel) {
  // Llama-2-7B shape: H 4096, I 11008, 32 layers, 32 heads = 32 KV heads, head_dim 128, V 32000.
  //   params = 2 * 32000*4096 262144000 + 32 * (4 * 4096*4096 + 3*11008*4096 + 2*4096 = 202383360)
  //            + 4096 = 6738415616; weights 13476831232
  //   kv/tok = 32 * 2 * 32 * 128 * 2 = 524288 (4x the 8-KV-head Mistral, MHA costs that much)
  //   ws     = 2048 * 4 * (12288 + 8192 + 8192 + 22016 + 32000 = 82688) = 677380096
  //   budget = 34359738368 - 13476831232 - 677380096 - 687194767 = 19518332273
  //   kv     = floor(19518332273 * 0.9) = floor(17566499045.7) = 17566499045
  //   pages  = floor(17566499045 / 8388608) = 2094 (33504 tokens); seq 4096 = 256 pages -> 8
  const ModelConfig model = mha_model();
  ASSERT_EQ(parameter_count(model), 6738415616u);
  ASSERT_EQ(kv_bytes_per_token(model, DType::kBF16), 524288u);
  const KvPlan p = plan_for(model, memory_of(k32GiB), 13476831232);
  EXPECT_EQ(p.workspace_bytes, 677380096u);
  EXPECT_EQ(p.budget_bytes, 19518332273u);
  EXPECT_EQ(p.kv_budget_bytes_per_rank, 17566499045u);
  EXPECT_EQ(p.num_pages_per_rank, 2094);
  EXPECT_EQ(p.max_total_tokens, 33504);
  EXPECT_EQ(p.num_sequences_per_rank, 8);
}

TEST(CapacityPlannerTest, LayoutMatchesModelKvBytesPerToken) {
  for (const char* name : {"llama-3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b", "mistral-7b-v0.3"}) {
    const ModelConfig model = fixture_model(name);
    for (const DType dtype : {DType::kBF16, DType::kF32}) {
      for (const int tp : {1, 2, 16}) {
        EXPECT_EQ(startup::kv_layout_for(model, dtype, 16, tp).bytes_per_token(), kv_bytes_per_token(model, dtype, tp))
            << name << " tp " << tp;
      }
    }
  }
  // f32 doubles the bf16 cost: Llama-3.2-1B 16 * 2 * 8 * 64 * 4 = 65536.
  EXPECT_EQ(startup::kv_layout_for(fixture_model("llama-3.2-1b"), DType::kF32, 16).bytes_per_token(), 65536u);
}

TEST(CapacityPlannerTest, F32KvHalvesTheTokens) {
  // Llama-3.2-1B, f32 KV: kv 26931374309 as above; pages = floor(26931374309 / (65536 * 16 = 1048576))
  //   = 25683 (410928 tokens).
  const ModelConfig model = fixture_model("llama-3.2-1b");
  const auto kv = config::resolve_kv({}, model);
  const KvPlan p = startup::plan_kv_cache(kv, startup::kv_layout_for(model, DType::kF32, 16), model,
                                         memory_of(k32GiB), 2471628800);
  EXPECT_EQ(p.num_pages_per_rank, 25683);
  EXPECT_EQ(p.max_total_tokens, 410928);
}

TEST(CapacityPlannerTest, CgroupV2LimitBinds) {
  // tests/fixtures/cgroup/v2: memory.max 4 GiB - memory.current 1 GiB = 3221225472 < MemAvailable.
  // Qwen2.5-0.5B: reserve = max(134217728, 3221225472 / 50 = 64424509) = 134217728
  //   budget = 3221225472 - 988065536 - 1363148800 - 134217728 = 735793408
  //   kv     = floor(735793408 * 0.9) = floor(662214067.2) = 662214067
  //   pages  = floor(662214067 / 196608) = 3368 (53888 tokens); one sequence of 32768 (2048 pages)
  const MemoryInfo memory = read_memory_info(kFixtures + "/cgroup/v2");
  ASSERT_EQ(memory.usable_bytes, 3221225472u);
  const KvPlan p = plan_for(fixture_model("qwen2.5-0.5b"), memory, 988065536);
  EXPECT_EQ(p.usable_bound, "cgroup v2 limit minus usage");
  EXPECT_EQ(p.reserve_bytes, 134217728u);
  EXPECT_EQ(p.budget_bytes, 735793408u);
  EXPECT_EQ(p.kv_budget_bytes_per_rank, 662214067u);
  EXPECT_EQ(p.num_pages_per_rank, 3368);
  EXPECT_EQ(p.max_total_tokens, 53888);
  EXPECT_EQ(p.num_sequences_per_rank, 1);
}

TEST(CapacityPlannerTest, CgroupV1TooSmallForOneSequence) {
  // tests/fixtures/cgroup/v1: limit 2 GiB - usage 512 MiB = 1610612736.
  // Qwen2.5-0.5B at 512 batched tokens: ws = 512 * 4 * 166400 = 340787200
  //   reserve = max(134217728, 1610612736 / 50 = 32212254) = 134217728
  //   budget = 1610612736 - 988065536 - 340787200 - 134217728 = 147542272
  //   kv     = floor(147542272 * 0.9) = floor(132788044.8) = 132788044
  //   pages  = floor(132788044 / 196608) = 675 (10800 tokens)
  // A sequence of 32768 tokens needs 2048 pages = 402653184 bytes; 675 pages are 675 * 196608 =
  // 132710400 bytes, short by 402653184 - 132710400 = 269942784.
  const MemoryInfo memory = read_memory_info(kFixtures + "/cgroup/v1");
  ASSERT_EQ(memory.usable_bytes, 1610612736u);
  const ModelConfig model = fixture_model("qwen2.5-0.5b");
  config::KvFlags flags;
  flags.max_num_batched_tokens = 512;
  try {
    plan_for(model, memory, 988065536, flags);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--max-model-len 32768"));
    EXPECT_THAT(e.message(), HasSubstr("2048 pages of 16 tokens, 402653184 bytes"));
    EXPECT_THAT(e.message(), HasSubstr("132710400 bytes"));
    EXPECT_THAT(e.message(), HasSubstr("short by 269942784 bytes"));
    EXPECT_THAT(e.message(), HasSubstr("cgroup v1 limit minus usage"));
  }
  // At --max-model-len 512 (32 pages) sequences fit: floor(675 / 32) = 21.
  flags.max_model_len = 512;
  const KvPlan p = plan_for(model, memory, 988065536, flags);
  EXPECT_EQ(p.num_pages_per_rank, 675);
  EXPECT_EQ(p.max_total_tokens, 10800);
  EXPECT_EQ(p.pages_per_sequence, 32);
  EXPECT_EQ(p.num_sequences_per_rank, 21);
}

TEST(CapacityPlannerTest, NoBudgetLeftNamesTheShortfall) {
  // tests/fixtures/cgroup/v2_nested: the parent's 2 GiB - 1.5 GiB = 536870912 binds.
  // Qwen2.5-0.5B: reserve = max(134217728, 536870912 / 50 = 10737418) = 134217728;
  //   988065536 + 1363148800 + 134217728 = 2485432064 spent, 2485432064 - 536870912 = 1948561152 short.
  const MemoryInfo memory = read_memory_info(kFixtures + "/cgroup/v2_nested");
  ASSERT_EQ(memory.usable_bytes, 536870912u);
  try {
    plan_for(fixture_model("qwen2.5-0.5b"), memory, 988065536);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("no memory is left for the KV cache"));
    EXPECT_THAT(e.message(), HasSubstr("short by 1948561152 bytes"));
  }
}

TEST(CapacityPlannerTest, DataParallelSplitsTheBudget) {
  // Llama-3.2-1B, dp 2: weights once, workspace per rank.
  //   budget   = 34359738368 - 2471628800 - 2 * 1277165568 - 687194767 = 28646583665
  //   kv/rank  = floor(28646583665 * 0.9 / 2) = floor(12890962649.25) = 12890962649
  //   pages    = floor(12890962649 / 524288) = 24587 per rank (393392 tokens); 8192-page sequences: 3
  //   pool     = 2 * 24587 = 49174 pages
  const ModelConfig model = fixture_model("llama-3.2-1b");
  config::KvFlags flags;
  flags.dp_size = 2;
  const KvPlan p = plan_for(model, memory_of(k32GiB), 2471628800, flags);
  EXPECT_EQ(p.dp_size, 2);
  EXPECT_EQ(p.budget_bytes, 28646583665u);
  EXPECT_EQ(p.kv_budget_bytes_per_rank, 12890962649u);
  EXPECT_EQ(p.num_pages_per_rank, 24587);
  EXPECT_EQ(p.max_total_tokens, 393392);
  EXPECT_EQ(p.num_sequences_per_rank, 3);
  EXPECT_EQ(p.num_pages(), 49174);
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].first_page, 0);
  EXPECT_EQ(p.ranks[1].first_page, 24587);
  for (const RankPlan& r : p.ranks) {
    EXPECT_EQ(r.num_pages, 24587);
    EXPECT_EQ(r.max_total_tokens, 393392);
    EXPECT_EQ(r.kv_bytes, 24587ull * 524288);
  }
}

TEST(CapacityPlannerTest, DataParallelUnderCgroup) {
  // cgroup v2 (3221225472 usable), Qwen2.5-0.5B, dp 3, 256 batched tokens, max_model_len 1024:
  //   ws     = 256 * 4 * 166400 = 170393600
  //   budget = 3221225472 - 988065536 - 3 * 170393600 - 134217728 = 1587761408
  //   kv     = floor(1587761408 * 0.9 / 3) = floor(476328422.4) = 476328422
  //   pages  = floor(476328422 / 196608) = 2422 per rank (38752 tokens); 64-page sequences: floor(2422 / 64) = 37
  config::KvFlags flags;
  flags.dp_size = 3;
  flags.max_num_batched_tokens = 256;
  flags.max_model_len = 1024;
  const KvPlan p = plan_for(fixture_model("qwen2.5-0.5b"), read_memory_info(kFixtures + "/cgroup/v2"), 988065536,
                            flags);
  EXPECT_EQ(p.workspace_bytes, 170393600u);
  EXPECT_EQ(p.budget_bytes, 1587761408u);
  EXPECT_EQ(p.kv_budget_bytes_per_rank, 476328422u);
  EXPECT_EQ(p.num_pages_per_rank, 2422);
  EXPECT_EQ(p.num_sequences_per_rank, 37);
  ASSERT_EQ(p.ranks.size(), 3u);
  EXPECT_EQ(p.ranks[2].first_page, 2 * 2422);
}

TEST(CapacityPlannerTest, ExplicitMaxTotalTokens) {
  const ModelConfig model = fixture_model("llama-3.2-1b");
  config::KvFlags flags;
  // Exactly what auto gives (51367 pages = 821872 tokens, see above), plus one token (not a whole
  // page): rounds down to 51367 pages.
  flags.max_total_tokens = "821873";
  KvPlan p = plan_for(model, memory_of(k32GiB), 2471628800, flags);
  EXPECT_TRUE(p.explicit_max_total_tokens);
  EXPECT_EQ(p.num_pages_per_rank, 51367);
  EXPECT_EQ(p.max_total_tokens, 821872);
  // Fewer than auto: 1000 tokens -> 62 pages (992 tokens); a 992-token sequence is 62 pages.
  flags.max_total_tokens = "1000";
  flags.max_model_len = 992;
  p = plan_for(model, memory_of(k32GiB), 2471628800, flags);
  EXPECT_EQ(p.num_pages_per_rank, 62);
  EXPECT_EQ(p.max_total_tokens, 992);
  EXPECT_EQ(p.auto_max_total_tokens, 821872);
  EXPECT_EQ(p.kv_bytes_per_rank, 32505856u);  // 62 * 524288
  EXPECT_EQ(p.num_sequences_per_rank, 1);
}

TEST(CapacityPlannerTest, ExplicitTooLargeStatesNeededAndAvailableBytes) {
  // One page more than auto: 51368 pages (821888 tokens) * 524288 = 26931625984 bytes needed;
  // 26931374309 available.
  config::KvFlags flags;
  flags.max_total_tokens = "821888";
  try {
    plan_for(fixture_model("llama-3.2-1b"), memory_of(k32GiB), 2471628800, flags);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--max-total-tokens 821888 does not fit"));
    EXPECT_THAT(e.message(), HasSubstr("need 26931625984 bytes"));
    EXPECT_THAT(e.message(), HasSubstr("leaves 26931374309 bytes"));
    EXPECT_THAT(e.message(), HasSubstr("room for 821872 tokens"));
  }
}

TEST(CapacityPlannerTest, ExplicitBelowOneSequenceIsAnError) {
  config::KvFlags flags;
  flags.max_total_tokens = "1000";  // 62 pages; the default max_model_len 131072 needs 8192
  EXPECT_THROW(plan_for(fixture_model("llama-3.2-1b"), memory_of(k32GiB), 2471628800, flags), Error);
}

TEST(CapacityPlannerTest, MeasuredWorkspaceAndWeightsAlreadyResident) {
  const ModelConfig model = fixture_model("llama-3.2-1b");
  const auto kv = config::resolve_kv({}, model);
  const auto layout = startup::kv_layout_for(model, DType::kBF16, 16);
  int probed_tokens = 0;
  const startup::WorkspaceProbe probe = [&](int tokens) {
    probed_tokens = tokens;
    return uint64_t{1} << 30;
  };
  // Usable read after loading: budget = 34359738368 - 1073741824 - 687194767 = 32598801777
  //   kv = floor(32598801777 * 0.9) = floor(29338921599.3) = 29338921599;
  //   pages = floor(29338921599 / 524288) = 55959
  const KvPlan p = startup::plan_kv_cache(kv, layout, model, memory_of(k32GiB), 2471628800, probe, true);
  EXPECT_EQ(probed_tokens, 2048);
  EXPECT_EQ(p.workspace_source, "measured");
  EXPECT_FALSE(p.weights_subtracted);
  EXPECT_EQ(p.budget_bytes, 32598801777u);
  EXPECT_EQ(p.num_pages_per_rank, 55959);
}

TEST(CapacityPlannerTest, PlainNumbers) {
  // usable 1 GiB, reserve = max(128 MiB, 1073741824 / 50 = 21474836) = 134217728:
  //   budget = 1073741824 - 100000000 - 200000000 - 134217728 = 639524096;
  //   mem fraction 1.0 -> pages = floor(639524096 / (1000 * 4)) = floor(159881.024) = 159881
  KvPlanInput in;
  in.usable_bytes = 1073741824;
  in.usable_bound = "test";
  in.weight_bytes = 100000000;
  in.workspace_bytes = 200000000;
  in.max_num_batched_tokens = 64;
  in.kv_bytes_per_token = 1000;
  in.page_size = 4;
  in.mem_fraction = 1.0;
  in.max_model_len = 10;
  const KvPlan p = plan_kv_capacity(in);
  EXPECT_EQ(p.reserve_bytes, 134217728u);
  EXPECT_EQ(p.budget_bytes, 639524096u);
  EXPECT_EQ(p.num_pages_per_rank, 159881);
  EXPECT_EQ(p.max_total_tokens, 639524);        // 159881 * 4
  EXPECT_EQ(p.pages_per_sequence, 3);           // ceil(10 / 4)
  EXPECT_EQ(p.num_sequences_per_rank, 53293);  // floor(159881 / 3)
  // mem fraction 0.5: floor(639524096 * 0.5) = 319762048 -> floor(319762048 / 4000) = 79940 pages.
  in.mem_fraction = 0.5;
  EXPECT_EQ(plan_kv_capacity(in).num_pages_per_rank, 79940);
}

TEST(CapacityPlannerTest, ReserveRule) {
  EXPECT_EQ(reserve_bytes_for(0), 134217728u);           // the 128 MiB floor
  EXPECT_EQ(reserve_bytes_for(6710886400), 134217728u);  // 6.25 GiB / 50 = 128 MiB exactly
  EXPECT_EQ(reserve_bytes_for(6710886450), 134217729u);  // 50 bytes more: 2% takes over
  EXPECT_EQ(reserve_bytes_for(k32GiB), kReserve32GiB);
}

TEST(CapacityPlannerTest, InvalidInputs) {
  KvPlanInput in;
  in.usable_bytes = 1ull << 40;
  in.max_num_batched_tokens = 1;
  in.kv_bytes_per_token = 1000;
  in.max_model_len = 16;
  EXPECT_NO_THROW(plan_kv_capacity(in));
  for (const double f : {0.0, -0.1, 1.01}) {
    KvPlanInput bad = in;
    bad.mem_fraction = f;
    EXPECT_THROW(plan_kv_capacity(bad), Error) << f;
  }
  KvPlanInput bad = in;
  bad.dp_size = 0;
  EXPECT_THROW(plan_kv_capacity(bad), Error);
  bad = in;
  bad.max_total_tokens = 0;
  EXPECT_THROW(plan_kv_capacity(bad), Error);
}

TEST(CapacityPlannerTest, PageIdRangeCapsAuto) {
  // 1 TiB of budget over 1 byte per token: far more than 2^31 - 1 pages.
  KvPlanInput in;
  in.usable_bytes = 1ull << 42;
  in.max_num_batched_tokens = 1;
  in.kv_bytes_per_token = 1;
  in.page_size = 1;
  in.max_model_len = 16;
  in.dp_size = 2;
  const KvPlan p = plan_kv_capacity(in);
  EXPECT_TRUE(p.capped_by_page_ids);
  EXPECT_EQ(p.num_pages_per_rank, kMaxPoolPages / 2);
}

// The kjv-tiny shape on a 24 GiB machine: 8 layers x 2 x 2 KV heads x 64 x 2 B = 4096 B per
// token, page 16 (65536 B), max model len 512 (32 pages).
KvPlanInput kjv_tiny_input() {
  KvPlanInput in;
  in.usable_bytes = 24ull << 30;  // 25769803776
  in.usable_bound = "test";
  in.weight_bytes = 27'000'000;
  in.workspace_bytes = 80'000'000;
  in.max_num_batched_tokens = 2048;
  in.kv_bytes_per_token = 4096;
  in.page_size = 16;
  in.max_model_len = 512;
  return in;
}

TEST(CapacityPlannerTest, CpuAutoIsCappedAtWhatTheSchedulerCanUse) {
  KvPlanInput in = kjv_tiny_input();
  // Memory alone: reserve = floor(25769803776 / 50) = 515396075;
  //   budget = 25769803776 - 27000000 - 80000000 - 515396075 = 25147407701;
  //   kv = floor(25147407701 * 0.9) = 22632666930 (floor of ...930.9); pages = floor(/65536) = 345347
  const KvPlan gpu_like = plan_kv_capacity(in);
  EXPECT_EQ(gpu_like.num_pages_per_rank, 345347);
  EXPECT_EQ(gpu_like.bound, CapacityBound::kMemory);
  EXPECT_EQ(gpu_like.prefix_cache_pages, -1);  // no budget: every page not in use
  // 256 running x 32 pages = 8192 pages, prefix cache auto = 8192 / 4 = 2048 pages -> 10240 pages.
  in.max_running_requests = 256;
  const KvPlan p = plan_kv_capacity(in);
  EXPECT_EQ(p.bound, CapacityBound::kScheduler);
  EXPECT_EQ(p.memory_max_total_tokens, 345347 * 16);
  EXPECT_EQ(p.running_tokens, 131072);        // 8192 * 16
  EXPECT_EQ(p.scheduler_tokens, 163840);      // 10240 * 16
  EXPECT_EQ(p.num_pages_per_rank, 10240);
  EXPECT_EQ(p.max_total_tokens, 163840);
  EXPECT_EQ(p.prefix_cache_pages, 2048);
  EXPECT_EQ(p.prefix_cache_source, "auto");
  EXPECT_EQ(p.kv_bytes_per_rank, 671088640u);  // 10240 * 65536
  // 27000000 + 80000000 + 515396075 + 671088640
  EXPECT_EQ(p.resident_bound_bytes, 1293484715u);
  // An explicit budget: floor(1000 / 16) = 62 pages -> 8192 + 62 = 8254 pages.
  in.prefix_cache_tokens = 1000;
  const KvPlan q = plan_kv_capacity(in);
  EXPECT_EQ(q.num_pages_per_rank, 8254);
  EXPECT_EQ(q.prefix_cache_pages, 62);
  EXPECT_EQ(q.prefix_cache_source, "explicit");
  // The prefix cache off: 8192 pages, nothing kept.
  in.prefix_cache_tokens.reset();
  in.prefix_cache_enabled = false;
  const KvPlan r = plan_kv_capacity(in);
  EXPECT_EQ(r.num_pages_per_rank, 8192);
  EXPECT_EQ(r.prefix_cache_pages, 0);
  EXPECT_EQ(r.prefix_cache_source, "disabled");
}

TEST(CapacityPlannerTest, MemoryStillBoundsTheCpuPlan) {
  KvPlanInput in = kjv_tiny_input();
  in.usable_bytes = 1ull << 30;  // reserve 128 MiB: budget = 1073741824 - 27000000 - 80000000 - 134217728
  in.max_running_requests = 256;  //   = 832524096; kv = floor(* 0.9) = 749271686; 11432 pages >= 10240
  const KvPlan p = plan_kv_capacity(in);
  EXPECT_EQ(p.memory_max_total_tokens, 11432 * 16);
  EXPECT_EQ(p.num_pages_per_rank, 10240);
  EXPECT_EQ(p.bound, CapacityBound::kScheduler);
  in.usable_bytes = 900ull << 20;  // 943718400 -> budget 702500672, kv 632250604, pages 9647 < 10240
  EXPECT_EQ(plan_kv_capacity(in).num_pages_per_rank, 9647);
  EXPECT_EQ(plan_kv_capacity(in).bound, CapacityBound::kMemory);
  in.usable_bytes = 800ull << 20;  // 838860800 -> budget 597643072, kv 537878764, pages 8207: budget
  const KvPlan small = plan_kv_capacity(in);  // capped at the pool: min(2048, 8207) = 2048 pages
  EXPECT_EQ(small.num_pages_per_rank, 8207);
  EXPECT_EQ(small.prefix_cache_pages, 2048);
  in.prefix_cache_tokens = 1'000'000;  // 62500 pages asked, the pool has 8207
  EXPECT_EQ(plan_kv_capacity(in).prefix_cache_pages, 8207);
}

TEST(CapacityPlannerTest, ExplicitTotalMayExceedTheSchedulerCapButNotMemory) {
  KvPlanInput in = kjv_tiny_input();
  in.max_running_requests = 4;  // 4 x 32 + 32 = 160 pages
  EXPECT_EQ(plan_kv_capacity(in).num_pages_per_rank, 160);
  in.max_total_tokens = 1'000'000;  // 62500 pages: fits the memory (345347)
  const KvPlan p = plan_kv_capacity(in);
  EXPECT_EQ(p.num_pages_per_rank, 62500);
  EXPECT_EQ(p.bound, CapacityBound::kExplicit);
  in.max_total_tokens = 345348 * 16;  // one page more than the memory holds
  try {
    plan_kv_capacity(in);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--max-total-tokens 5525568 does not fit"));
    EXPECT_THAT(e.message(), HasSubstr("room for 5525552 tokens"));
  }
}

TEST(CapacityPlannerTest, PrefixCacheBudgetErrorsNameTheFlags) {
  KvPlanInput in = kjv_tiny_input();
  in.prefix_cache_tokens = -1;
  EXPECT_THROW(plan_kv_capacity(in), Error);
  in.prefix_cache_tokens = 64;
  in.prefix_cache_enabled = false;
  try {
    plan_kv_capacity(in);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--prefix-cache-tokens 64"));
    EXPECT_THAT(e.message(), HasSubstr("--disable-prefix-cache"));
  }
}

TEST(KvConfigTest, PrefixCacheTokensFlag) {
  const ModelConfig model = fixture_model("qwen3-0.6b");
  EXPECT_FALSE(config::resolve_kv({}, model).prefix_cache_tokens.has_value());
  config::KvFlags flags;
  flags.prefix_cache_tokens = "0";
  EXPECT_EQ(config::resolve_kv(flags, model).prefix_cache_tokens, 0);
  flags.prefix_cache_tokens = "65536";
  EXPECT_EQ(config::resolve_kv(flags, model).prefix_cache_tokens, 65536);
  for (const char* text : {"", "-1", "12x", "lots", "AUTO"}) {
    flags.prefix_cache_tokens = text;
    try {
      config::resolve_kv(flags, model);
      FAIL() << "expected an error for '" << text << "'";
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr("--prefix-cache-tokens")) << text;
    }
  }
  flags.prefix_cache_tokens = "1024";
  flags.disable_prefix_cache = true;
  try {
    config::resolve_kv(flags, model);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--disable-prefix-cache"));
  }
}

TEST(KvConfigTest, Defaults) {
  const ModelConfig model = fixture_model("qwen3-0.6b");
  const auto r = config::resolve_kv({}, model);
  EXPECT_FALSE(r.max_total_tokens.has_value());
  EXPECT_EQ(r.mem_fraction, 0.90);
  EXPECT_EQ(r.max_num_batched_tokens, 2048);
  EXPECT_EQ(r.max_model_len, 40960);
  EXPECT_EQ(r.dp_size, 1);
  EXPECT_TRUE(r.enable_prefix_cache);
  config::KvFlags flags;
  flags.disable_prefix_cache = true;
  flags.max_total_tokens = "4096";
  const auto s = config::resolve_kv(flags, model);
  EXPECT_FALSE(s.enable_prefix_cache);
  EXPECT_EQ(s.max_total_tokens, 4096);
}

TEST(KvConfigTest, BadValues) {
  const ModelConfig model = fixture_model("qwen3-0.6b");
  for (const char* text : {"", "0", "-5", "12x", "lots", "AUTO"}) {
    config::KvFlags flags;
    flags.max_total_tokens = text;
    EXPECT_THROW(config::resolve_kv(flags, model), Error) << text;
  }
  config::KvFlags flags;
  flags.mem_fraction = 1.5;
  EXPECT_THROW(config::resolve_kv(flags, model), Error);
  flags = {};
  flags.max_model_len = 40961;
  try {
    config::resolve_kv(flags, model);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("max_position_embeddings 40960"));
  }
  flags = {};
  flags.dp_size = -1;
  EXPECT_THROW(config::resolve_kv(flags, model), Error);
}

}  // namespace
}  // namespace spindle::kv

namespace spindle::kv {
namespace {

// A draft model's pool has as many pages as the target's: a page costs both pools' bytes.
// Llama-3.2-1B, f32 KV as in F32KvHalvesTheTokens (kv 26931374309 bytes per rank): with a draft
// of a quarter of its bytes per token (16384), pages = floor(26931374309 / ((65536 + 16384) * 16
// = 1310720)) = 20547; the draft's pool holds 20547 * 16384 * 16 bytes; the resident bound
// counts both pools.
TEST(CapacityPlannerDraftTest, PagesAreSizedForBothPools) {
  const ModelConfig model = fixture_model("llama-3.2-1b");
  const auto kv = config::resolve_kv({}, model);
  const auto layout = startup::kv_layout_for(model, DType::kF32, 16);
  const KvPlan alone = startup::plan_kv_cache(kv, layout, model, memory_of(k32GiB), 2471628800);
  const KvPlan p = startup::plan_kv_cache(kv, layout, model, memory_of(k32GiB), 2471628800, {},
                                         false, 0, 16384);
  EXPECT_EQ(p.num_pages_per_rank, 20547);
  EXPECT_EQ(p.draft_kv_bytes_per_rank, 20547ull * 16384 * 16);
  EXPECT_EQ(p.kv_bytes_per_rank, 20547ull * 65536 * 16);
  EXPECT_EQ(p.resident_bound_bytes - alone.resident_bound_bytes,
            (p.kv_bytes_per_rank + p.draft_kv_bytes_per_rank) - alone.kv_bytes_per_rank);
}

}  // namespace
}  // namespace spindle::kv
