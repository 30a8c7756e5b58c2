#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "attn/select/validation_cache.h"
#include "support/fake_machines.h"

namespace spindle::attn {
namespace {

namespace fs = std::filesystem;
using attn::ValidationOutcome;

const attn::AttentionShape kShape{32, 8, 128, 0.0884f, DType::kBF16, 16};

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("spindle_cache_test_" + name + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

struct CountingValidator {
  int calls = 0;
  BackendValidator fn() {
    return [this](const std::string& name, const attn::AttentionShape&, bool timing) {
      ++calls;
      ValidationOutcome o;
      o.status = name == "cpu_avx2" ? CheckStatus::kPass : CheckStatus::kPass;
      o.report.backend = name;
      o.report.timed = timing;
      o.report.prefill_tokens_per_s = name == "reference" ? 10 : 1000;
      o.report.decode_tokens_per_s = name == "reference" ? 1 : 100;
      return o;
    };
  }
};

TEST(ValidationCacheTest, SecondSelectionIsServedFromDisk) {
  const auto dir = fresh_dir("second");
  const auto device = testing::avx2_machine();
  const std::string key = ValidationCache::make_key("build1", "fp1", kShape);
  CountingValidator v;
  {
    ValidationCache cache(dir, key);
    const auto s = select_attention_backends(device, kShape, {}, cache.wrap(v.fn()));
    EXPECT_EQ(s.prefill_backend, "cpu_avx2");
    EXPECT_EQ(cache.num_misses(), 2);
    cache.save();
  }
  EXPECT_EQ(v.calls, 2);
  {
    ValidationCache cache(dir, key);
    const auto s = select_attention_backends(device, kShape, {}, cache.wrap(v.fn()));
    EXPECT_EQ(s.prefill_backend, "cpu_avx2");
    EXPECT_EQ(cache.num_hits(), 2);
    EXPECT_EQ(cache.num_misses(), 0);
  }
  EXPECT_EQ(v.calls, 2);  // nothing re-validated
  fs::remove_all(dir);
}

TEST(ValidationCacheTest, ChangedKeyRevalidates) {
  const auto dir = fresh_dir("key");
  auto other_shape = kShape;
  other_shape.kv_dtype = DType::kF32;
  const auto k1 = ValidationCache::make_key("build1", "fp1", kShape);
  EXPECT_NE(ValidationCache(dir, k1).path(), ValidationCache(dir, ValidationCache::make_key("build2", "fp1", kShape)).path());
  EXPECT_NE(ValidationCache(dir, k1).path(), ValidationCache(dir, ValidationCache::make_key("build1", "fp2", kShape)).path());
  EXPECT_NE(ValidationCache(dir, k1).path(), ValidationCache(dir, ValidationCache::make_key("build1", "fp1", other_shape)).path());
}

TEST(ValidationCacheTest, CorruptFileIsIgnoredAndRewritten) {
  const auto dir = fresh_dir("corrupt");
  const std::string key = ValidationCache::make_key("b", "f", kShape);
  fs::create_directories(dir);
  const fs::path path = ValidationCache(dir, key).path();
  std::ofstream(path) << "{\"key\": \"b\", \"outcomes\": [garbage";
  CountingValidator v;
  ValidationCache cache(dir, key);
  EXPECT_FALSE(cache.find("cpu_avx2", true).has_value());
  select_attention_backends(testing::avx2_machine(), kShape, {}, cache.wrap(v.fn()));
  cache.save();
  EXPECT_EQ(v.calls, 2);
  ValidationCache again(dir, key);
  EXPECT_TRUE(again.find("cpu_avx2", true).has_value());
  fs::remove_all(dir);
}

TEST(ValidationCacheTest, TimeoutsAreNotKeptButCrashesAre) {
  const auto dir = fresh_dir("keep");
  ValidationCache cache(dir, "k");
  ValidationOutcome timeout;
  timeout.status = CheckStatus::kTimeout;
  ValidationOutcome crash;
  crash.status = CheckStatus::kCrash;
  cache.store("a", timeout);
  cache.store("b", crash);
  EXPECT_FALSE(cache.find("a", false).has_value());
  ASSERT_TRUE(cache.find("b", false).has_value());
  EXPECT_EQ(cache.find("b", true)->status, CheckStatus::kCrash);
}

TEST(ValidationCacheTest, UntimedPassDoesNotAnswerATimedQuestion) {
  ValidationCache cache(fresh_dir("timed"), "k");
  ValidationOutcome pass;
  pass.status = CheckStatus::kPass;
  pass.report.timed = false;
  cache.store("a", pass);
  EXPECT_TRUE(cache.find("a", false).has_value());
  EXPECT_FALSE(cache.find("a", true).has_value());
}

}  // namespace
}  // namespace spindle::attn
