// The spindle binary end to end: `info` on model folders this test writes (counts computed by hand
// below), each malformed input's own error (exit 1, never a signal), and `doctor` using its cache.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/safetensors_writer.h"
#include "support/run_spindle.h"
#include "util/mapped_file.h"

namespace spindle {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::RunResult;
using testing::run_spindle;

// Llama: vocab 32, hidden 16, intermediate 24, 2 layers, 4 heads of head_dim 8 over 2 KV heads.
const char* kTinyLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32, "hidden_size": 16,
  "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 8, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})";

std::vector<testing::NamedTensor> tiny_llama_tensors() {
  std::vector<testing::NamedTensor> t;
  uint32_t seed = 1;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    t.push_back(testing::random_tensor(name, DType::kBF16, std::move(shape), seed++));
  };
  add("model.embed_tokens.weight", {32, 16});
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {16});
    add(p + "self_attn.q_proj.weight", {32, 16});
    add(p + "self_attn.k_proj.weight", {16, 16});
    add(p + "self_attn.v_proj.weight", {16, 16});
    add(p + "self_attn.o_proj.weight", {16, 32});
    add(p + "post_attention_layernorm.weight", {16});
    add(p + "mlp.gate_proj.weight", {24, 16});
    add(p + "mlp.up_proj.weight", {24, 16});
    add(p + "mlp.down_proj.weight", {16, 24});
  }
  add("model.norm.weight", {16});
  add("lm_head.weight", {32, 16});
  return t;
}

fs::path write_model(const std::string& name, const std::vector<testing::NamedTensor>& tensors,
                     const std::string& config = kTinyLlamaConfig) {
  const fs::path dir = fs::temp_directory_path() / ("spindle_cli_model_" + name + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config;
  testing::write_safetensors(dir / "model.safetensors", tensors);
  return dir;
}

TEST(CliTest, InfoPrintsHandComputedCounts) {
  const fs::path dir = write_model("ok", tiny_llama_tensors());
  const RunResult r = run_spindle("info " + dir.string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  // embed 512 + 2 x (16 + 512 + 256 + 256 + 512 + 16 + 384 + 384 + 384) + norm 16 + lm_head 512
  EXPECT_EQ(j["model"]["num_parameters"], 6480);
  EXPECT_EQ(j["model"]["weight_bytes_per_dtype"]["BF16"], 12960);
  // 2 layers x (K, V) x 2 KV heads x head_dim 8 x bytes
  EXPECT_EQ(j["model"]["kv_bytes_per_token"]["BF16"], 128);
  EXPECT_EQ(j["model"]["kv_bytes_per_token"]["F32"], 256);
  EXPECT_EQ(j["model"]["architecture"], "LlamaForCausalLM");
  EXPECT_GE(j["machine"]["cpu"]["num_logical_cores"].get<int>(), 1);

  const RunResult text = run_spindle("info " + dir.string());
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("Parameters    6480"));
  EXPECT_THAT(text.out, HasSubstr("LlamaForCausalLM"));
  fs::remove_all(dir);
}

// A mixture of experts (tests/golden/mixtral-bf16: hidden 128, vocab 1024, 2 layers, 4 heads of 64,
// 2 KV heads, 4 experts of width 96, top 2, bf16): info and plan count every expert and the share a
// token reads. Per layer: q 32768 + k 16384 + v 16384 + o 32768 + norms 256 + router 512 + experts
// 4 x 3 x 96 x 128 = 147456 (246528); outer: embed 131072 + lm_head 131072 + norm 128 = 262272.
TEST(CliTest, InfoAndPlanCountTheExperts) {
  const fs::path dir = fs::path(SPINDLE_FIXTURES_DIR) / ".." / "golden" / "mixtral-bf16";
  const RunResult r = run_spindle("info " + dir.string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto m = nlohmann::json::parse(r.out)["model"];
  EXPECT_EQ(m["architecture"], "MixtralForCausalLM");
  EXPECT_EQ(m["num_parameters"], 2 * 246528 + 262272);
  EXPECT_EQ(m["num_active_parameters"], 2 * (246528 - 2 * 36864) + 262272);  // 2 of 4 experts
  EXPECT_EQ(m["moe"]["num_experts"], 4);
  EXPECT_EQ(m["moe"]["expert_bytes"], 2 * 147456 * 2);
  EXPECT_EQ(m["moe"]["active_expert_bytes_per_token"], 2 * 147456);
  const RunResult plan = run_spindle("plan " + dir.string() + " --estimate-workspace --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const auto p = nlohmann::json::parse(plan.out);
  EXPECT_EQ(p["weight_bytes"], 2 * (2 * 246528 + 262272));  // every expert is loaded
  EXPECT_EQ(p["expert_bytes"], 2 * 147456 * 2);
  EXPECT_EQ(p["num_active_parameters"], 2 * (246528 - 2 * 36864) + 262272);
  const RunResult text = run_spindle("plan " + dir.string() + " --estimate-workspace");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("of which experts"));
}

TEST(CliTest, InfoWithoutModelPrintsMachineFacts) {
  const RunResult r = run_spindle("info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Memory"));
  EXPECT_THAT(r.out, HasSubstr("avx2"));
  EXPECT_THAT(r.out, HasSubstr("Fingerprint"));
}

// util/switches.h: `info` lists the declared variables not at their default and names the
// SPINDLE_* ones the registry does not declare (a typo, a retired A/B switch); a malformed value
// stops every command with an error naming the variable.
TEST(CliTest, InfoListsNonDefaultAndUndeclaredSwitches) {
  const std::string env = "SPINDLE_NUM_THREADS=3 SPINDLE_API_KEY=hidden-key SPINDLE_NOT_A_SWITCH=1 SPINDLE_CUDA_PDL=0";
  const RunResult text = run_spindle("info", env);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("SPINDLE_NUM_THREADS=3"));
  EXPECT_THAT(text.out, HasSubstr("SPINDLE_API_KEY=(set)"));
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("hidden-key")));
  EXPECT_THAT(text.out, HasSubstr("SPINDLE_NOT_A_SWITCH  undeclared"));
  const RunResult json = run_spindle("info --json", env);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out).at("environment");
  EXPECT_EQ(j.at("not_default").at("SPINDLE_NUM_THREADS"), "3");
  EXPECT_EQ(j.at("undeclared"), nlohmann::json({"SPINDLE_CUDA_PDL", "SPINDLE_NOT_A_SWITCH"}));
}

TEST(CliTest, AMalformedSwitchStopsWithItsName) {
  const RunResult r = run_spindle("info", "SPINDLE_NUM_THREADS=lots");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("SPINDLE_NUM_THREADS='lots'"));
}

// platform/openmp_policy.h: libgomp's workers sleep after each parallel region unless the user
// chose otherwise. OMP_DISPLAY_ENV=VERBOSE makes libgomp print its settings when it starts, before
// main: once in the process the shell started (its defaults) and again in the re-executed one, whose
// GOMP_SPINCOUNT must be 0 (libgomp's value for PASSIVE; its default is 300000).
std::string last_gomp_spincount(const std::string& err) {
  const std::string key = "GOMP_SPINCOUNT = '";
  const size_t at = err.rfind(key);
  if (at == std::string::npos) return "(not printed)";
  const size_t begin = at + key.size();
  return err.substr(begin, err.find('\'', begin) - begin);
}

TEST(CliTest, OpenMpWorkersSleepUnlessTheUserChoseAPolicy) {
  if (!fs::exists("/proc/self/exe")) GTEST_SKIP() << "no /proc here: spindle cannot re-execute itself and keeps libgomp's defaults";
  const std::string clean = "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u SPINDLE_OMP_WAIT_POLICY_DEFAULTED OMP_DISPLAY_ENV=VERBOSE";
  const RunResult defaulted = run_spindle("info", clean);
  ASSERT_EQ(defaulted.exit_code, 0) << defaulted.err;
  EXPECT_THAT(defaulted.out, HasSubstr("OpenMP      OMP_WAIT_POLICY=PASSIVE (Spindle's default)"));
  EXPECT_EQ(last_gomp_spincount(defaulted.err), "0") << defaulted.err;

  const RunResult active = run_spindle("info", clean + " OMP_WAIT_POLICY=active");
  ASSERT_EQ(active.exit_code, 0) << active.err;
  EXPECT_THAT(active.out, HasSubstr("OpenMP      OMP_WAIT_POLICY=active (from the environment)"));
  EXPECT_NE(last_gomp_spincount(active.err), "0") << active.err;

  const RunResult spin = run_spindle("info --json", clean + " GOMP_SPINCOUNT=1000");
  ASSERT_EQ(spin.exit_code, 0) << spin.err;
  EXPECT_EQ(nlohmann::json::parse(spin.out).at("openmp_wait_policy"), "GOMP_SPINCOUNT=1000 (from the environment)");
  EXPECT_EQ(last_gomp_spincount(spin.err), "1000") << spin.err;
}

struct MalformedCase {
  std::string name;
  std::function<fs::path()> make;
  std::vector<std::string> expected;  // substrings of the error
};

TEST(CliTest, EveryMalformedModelGetsItsOwnErrorNeverACrash) {
  auto tensors = tiny_llama_tensors();
  std::vector<MalformedCase> cases = {
      {"no_config", [&] {
         auto d = write_model("noconfig", tensors);
         fs::remove(d / "config.json");
         return d;
       }, {"config.json"}},
      {"bad_json", [&] { return write_model("badjson", tensors, "{\"architectures\": [\"LlamaFor"); }, {"config.json"}},
      {"unknown_arch", [&] {
         return write_model("arch", tensors, R"({"architectures": ["GPTNeoXForCausalLM"]})");
       }, {"GPTNeoXForCausalLM", "LlamaForCausalLM"}},
      {"missing_tensor", [&] {
         auto t = tensors;
         t.pop_back();  // lm_head
         return write_model("missing", t);
       }, {"lm_head.weight"}},
      {"truncated_safetensors", [&] {
         auto d = write_model("trunc", tensors);
         fs::resize_file(d / "model.safetensors", 100);
         return d;
       }, {"model.safetensors"}},
      {"no_weights", [&] {
         auto d = write_model("noweights", tensors);
         fs::remove(d / "model.safetensors");
         return d;
       }, {"model.safetensors"}},
  };
  for (const auto& c : cases) {
    const fs::path dir = c.make();
    const RunResult r = run_spindle("info " + dir.string());
    EXPECT_EQ(r.signal, 0) << c.name;
    EXPECT_EQ(r.exit_code, 1) << c.name << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("error: ")) << c.name;
    for (const auto& s : c.expected) EXPECT_THAT(r.err, HasSubstr(s)) << c.name;
    fs::remove_all(dir);
  }
}

TEST(CliTest, DoctorChoosesAPairAndTheSecondRunUsesTheCache) {
  const fs::path cache = fs::temp_directory_path() / ("spindle_cli_cache_" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const std::string env = "SPINDLE_CACHE_DIR=" + cache.string();
  const std::string args = "doctor --heads 8 --kv-heads 2 --head-dim 64 --json";
  const RunResult first = run_spindle(args, env);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto j1 = nlohmann::json::parse(first.out);
  EXPECT_FALSE(j1["from_cache"].get<bool>());
  EXPECT_FALSE(j1["prefill_backend"].get<std::string>().empty());
  EXPECT_FALSE(j1["decode_backend"].get<std::string>().empty());
  EXPECT_EQ(j1["rows"].size(), 8u);  // four backends, two phases

  const RunResult second = run_spindle(args, env);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto j2 = nlohmann::json::parse(second.out);
  EXPECT_TRUE(j2["from_cache"].get<bool>());
  EXPECT_EQ(j2["prefill_backend"], j1["prefill_backend"]);
  EXPECT_EQ(j2["decode_backend"], j1["decode_backend"]);
  EXPECT_THAT(second.err, ::testing::Not(HasSubstr("validating attention backend")));
  fs::remove_all(cache);
}

// head_dim 32 (and every multiple of 16 up to 256) is offered to the optimized CPU backends; 40 is
// not, and doctor says so on each of their rows. Availability otherwise depends on this CPU, so
// only the head_dim reason is checked.
TEST(CliTest, DoctorCoversHeadDim32AndNamesUnsupportedSizes) {
  auto reasons_of = [](const nlohmann::json& j, const std::string& backend) {
    std::string all;
    for (const auto& row : j["rows"])
      if (row["backend"] == backend)
        for (const auto& r : row["unsupported_reasons"]) all += r.get<std::string>() + ";";
    return all;
  };
  const RunResult d32 = run_spindle("doctor --heads 8 --kv-heads 4 --head-dim 32 --json --no-backend-cache");
  ASSERT_EQ(d32.exit_code, 0) << d32.err;
  const auto j32 = nlohmann::json::parse(d32.out);
  const RunResult d40 = run_spindle("doctor --heads 8 --kv-heads 4 --head-dim 40 --json --no-backend-cache");
  ASSERT_EQ(d40.exit_code, 0) << d40.err;
  const auto j40 = nlohmann::json::parse(d40.out);
  for (const char* backend : {"cpu_avx2", "cpu_avx512", "cpu_amx"}) {
    EXPECT_THAT(reasons_of(j32, backend), ::testing::Not(HasSubstr("head_dim"))) << backend;
    EXPECT_THAT(reasons_of(j40, backend), HasSubstr("head_dim 40 not supported (multiples of 16 from 32 to 256)"))
        << backend;
  }
  EXPECT_EQ(j40["prefill_backend"], "reference");
}

// The measured workspace is kept next to the selection cache: the second start of generate on
// the embedded model validates nothing and measures nothing, and plans the same KV.
TEST(CliTest, SecondGenerateTakesTheWorkspaceFromTheCache) {
  const fs::path cache = fs::temp_directory_path() / ("spindle_cli_ws_cache_" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const std::string env = "SPINDLE_CACHE_DIR=" + cache.string();
  const std::string args = "generate -p 'And God said' -n 2 --temperature 0 --threads 1";
  const RunResult first = run_spindle(args, env + " SPINDLE_TYPO_SWITCH=1");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_THAT(first.err, HasSubstr("that Spindle does not declare: SPINDLE_TYPO_SWITCH"));  // serve / generate warn
  EXPECT_THAT(first.err, HasSubstr("workspace"));
  EXPECT_THAT(first.err, ::testing::Not(HasSubstr("cached: measured by an earlier start")));
  bool found = false;
  for (const auto& entry : fs::directory_iterator(cache)) {
    found = found || entry.path().filename().string().rfind("workspace-", 0) == 0;
  }
  EXPECT_TRUE(found) << "no workspace-*.json under " << cache;
  const RunResult second = run_spindle(args, env);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.err, HasSubstr("cached: measured by an earlier start"));
  EXPECT_THAT(second.err, ::testing::Not(HasSubstr("validating attention backend")));
  EXPECT_THAT(first.err, HasSubstr("validating linear kernel"));
  EXPECT_THAT(second.err, ::testing::Not(HasSubstr("validating linear kernel")));
  EXPECT_EQ(first.out, second.out);
  // --no-backend-cache measures again.
  const RunResult third = run_spindle(args + " --no-backend-cache", env);
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_THAT(third.err, ::testing::Not(HasSubstr("cached: measured by an earlier start")));
  fs::remove_all(cache);
}

// --quantization q8_0 runs models/kjv-tiny (BF16) through the int8 kernels; the output is
// text of its own (Q8_0 and BF16 may pick other tokens, so it is not compared); another value is a
// start-up error naming the flag and the values.
TEST(CliTest, GenerateWithQuantization) {
  const std::string model = (fs::path(SPINDLE_FIXTURES_DIR) / ".." / ".." / "models" / "kjv-tiny").string();
  const RunResult q8 = run_spindle("generate " + model + " --quantization q8_0 -p 'And God said' -n 6 "
                                   "--temperature 0 --threads 1 --no-stats");
  ASSERT_EQ(q8.exit_code, 0) << q8.err;
  EXPECT_GT(q8.out.size(), std::string("And God said\n").size());
  EXPECT_THAT(q8.err, HasSubstr("q8_0/"));  // the linear kernel's name in the start-up log
  const RunResult bad = run_spindle("generate " + model + " --quantization q4 -p 'x' -n 1 --threads 1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--quantization 'q4' is not one of: none, q8_0, fp8"));
}

// Several --prompt flags are queued at once (Engine::submit_batch: one batch) and printed in order, "[i] prompt" then
// the continuation; greedy, each equals that prompt's continuation generated alone.
TEST(CliTest, GenerateSubmitsSeveralPromptsAtOnce) {
  const std::string flags = " -n 6 --temperature 0 --threads 1 --no-stats";
  const RunResult both = run_spindle("generate -p 'And God said' -p 'In the beginning'" + flags);
  ASSERT_EQ(both.exit_code, 0) << both.err;
  const RunResult first = run_spindle("generate -p 'And God said'" + flags);
  const RunResult second = run_spindle("generate -p 'In the beginning'" + flags);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(both.out, "[0] " + first.out + "[1] " + second.out);
  EXPECT_GT(first.out.size(), std::string("And God said\n").size());
  // Two data-parallel ranks (DpGroup::submit_batch routes one prompt to each): the same texts.
  const RunResult dp = run_spindle("generate -p 'And God said' -p 'In the beginning' --dp-size 2 "
                                   "--load-balance-method round_robin" + flags);
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  EXPECT_EQ(dp.out, both.out);
}

// Where no GPU is usable (this test's usual machine), --device cuda stops with the probe's reason;
// on a GPU host the same command validates the CUDA backends (tools/gpu/h200_check.sh runs it).
TEST(CliTest, DoctorOnCudaWithoutAGpuSaysWhy) {
  const RunResult r = run_spindle("doctor --heads 8 --kv-heads 2 --head-dim 64 --device cuda:0 --no-backend-cache",
                                  "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--device cuda:0: no usable CUDA device"));
  const RunResult bad = run_spindle("doctor --heads 8 --head-dim 64 --device gpu0");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("--device 'gpu0' is not one of: cpu, cuda, cuda:N"));
}

TEST(CliTest, DoctorRejectsAnUnknownBackendListingTheNames) {
  const RunResult r = run_spindle("doctor --heads 8 --head-dim 64 --attention-backend flash --no-backend-cache");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("unknown attention backend 'flash'"));
  EXPECT_THAT(r.err, HasSubstr("cpu_avx2"));
}

// doctor's CPU linear table (kernels/cpu/select): a row per kernel and shape; a crashing kernel
// (SPINDLE_LINEAR_FAULT raises SIGILL in its validation child) is rejected while doctor goes on;
// --linear-kernel puts one kernel in every table; an unknown one lists the registered kernels.
TEST(CliTest, DoctorShowsTheLinearKernelsAndHonoursTheFlags) {
  const std::string base =
      "doctor --heads 8 --head-dim 64 --linear-shape 96x80:F32 --linear-shape 64x48:BF16 --json --no-backend-cache "
      "--attention-backend-policy priority";
  const RunResult faulty = run_spindle(base, "SPINDLE_LINEAR_FAULT=onednn_f32=crash");
  ASSERT_EQ(faulty.exit_code, 0) << faulty.err;
  const auto j = nlohmann::json::parse(faulty.out)["linear"];
  EXPECT_EQ(j["choices"].size(), 2u);
  bool avx2_available = false;
  for (const auto& row : j["rows"]) {
    if (row["kernel"] == "onednn_f32") {
      EXPECT_EQ(row["outcome"]["status"], "crash") << row.dump();
      EXPECT_THAT(row["outcome"]["detail"].get<std::string>(), HasSubstr("SIGILL"));
      EXPECT_TRUE(row["chosen_rows"].empty());
    }
    if (row["kernel"] == "amx" && row["shape"] == "96x80:F32") {
      EXPECT_THAT(row["unsupported_reasons"].dump(), HasSubstr("bf16 weights only"));
    }
    if (row["kernel"] == "avx2") avx2_available = row["unsupported_reasons"].empty();
  }
  const RunResult unknown = run_spindle(base + " --linear-kernel avx1024");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("unknown linear kernel 'avx1024'"));
  EXPECT_THAT(unknown.err, HasSubstr("onednn_bf16"));
  if (!avx2_available) GTEST_SKIP() << "this CPU lacks AVX2: the --linear-kernel avx2 half is not run";
  const RunResult forced = run_spindle(base + " --linear-kernel avx2");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  for (const auto& c : nlohmann::json::parse(forced.out)["linear"]["choices"]) {
    ASSERT_EQ(c["table"].size(), 1u) << c.dump();
    EXPECT_EQ(c["table"][0]["kernel"], "avx2");
  }
}

}  // namespace
}  // namespace spindle
