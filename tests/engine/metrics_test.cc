#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/metrics.h"

namespace spindle::engine {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, RendersPrometheusText) {
  Metrics m;
  m.set_info({{"model", "kjv-tiny"}, {"prefill_attention_backend", "cpu_avx2"}});
  m.update([](MetricsSnapshot& s) {
    s.num_requests_running = 3;
    s.kv_pages_used = 25;
    s.kv_pages_total = 100;
    s.generation_tokens_total = 42;
  });
  m.observe_time_to_first_token(0.03);
  m.observe_time_to_first_token(3.0);
  const std::string text = m.render();
  EXPECT_THAT(text, HasSubstr("# TYPE spindle_num_requests_running gauge\nspindle_num_requests_running 3\n"));
  EXPECT_THAT(text, HasSubstr("spindle_kv_cache_usage_ratio 0.25\n"));
  EXPECT_THAT(text, HasSubstr("spindle_generation_tokens_total 42\n"));
  // Cumulative buckets: 0.03 falls in le=0.04 and above; 3.0 only from le=5.
  EXPECT_THAT(text, HasSubstr("spindle_time_to_first_token_seconds_bucket{le=\"0.02\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("spindle_time_to_first_token_seconds_bucket{le=\"0.04\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("spindle_time_to_first_token_seconds_bucket{le=\"2.5\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("spindle_time_to_first_token_seconds_bucket{le=\"5\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("spindle_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("spindle_time_to_first_token_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("spindle_info{model=\"kjv-tiny\",prefill_attention_backend=\"cpu_avx2\"} 1\n"));
}

}  // namespace
}  // namespace spindle::engine
