// merge_rank_metrics (engine/dp_metrics.h): every rank's series with dp_rank, the totals first in
// each family (sums; _ratio gauges the mean; no spindle_info total), HELP/TYPE once, labels kept.
#include "engine/dp_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/metrics.h"

namespace spindle::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kRank0 =
    "# HELP spindle_num_requests_running Requests in the running batch.\n"
    "# TYPE spindle_num_requests_running gauge\n"
    "spindle_num_requests_running 2\n"
    "# HELP spindle_kv_cache_usage_ratio Fraction.\n"
    "# TYPE spindle_kv_cache_usage_ratio gauge\n"
    "spindle_kv_cache_usage_ratio 0.5\n"
    "# HELP spindle_steps_total Steps.\n"
    "# TYPE spindle_steps_total counter\n"
    "spindle_steps_total{phase=\"prefill\"} 3\n"
    "spindle_steps_total{phase=\"decode\"} 10\n"
    "# HELP spindle_ttft_seconds TTFT.\n"
    "# TYPE spindle_ttft_seconds histogram\n"
    "spindle_ttft_seconds_bucket{le=\"0.1\"} 1\n"
    "spindle_ttft_seconds_bucket{le=\"+Inf\"} 2\n"
    "spindle_ttft_seconds_sum 0.25\n"
    "spindle_ttft_seconds_count 2\n"
    "# HELP spindle_info Facts.\n"
    "# TYPE spindle_info gauge\n"
    "spindle_info{model=\"m\",backend=\"a\"} 1\n";

std::string rank1() {
  std::string t = kRank0;
  auto replace = [&](const std::string& from, const std::string& to) { t.replace(t.find(from), from.size(), to); };
  replace("spindle_num_requests_running 2", "spindle_num_requests_running 5");
  replace("spindle_kv_cache_usage_ratio 0.5", "spindle_kv_cache_usage_ratio 0.25");
  replace("{phase=\"decode\"} 10", "{phase=\"decode\"} 7");
  replace("spindle_ttft_seconds_sum 0.25", "spindle_ttft_seconds_sum 0.5");
  replace("backend=\"a\"", "backend=\"b\"");
  return t + "# HELP spindle_spec_new Only rank 1 has it.\n# TYPE spindle_spec_new counter\nspindle_spec_new 4\n" +
         "# HELP spindle_spec_accept_rate A per-rank average.\n# TYPE spindle_spec_accept_rate gauge\n"
         "spindle_spec_accept_rate 0.5\n";
}

TEST(DpMetricsTest, TotalsFirstThenEveryRank) {
  const std::string out = merge_rank_metrics({kRank0, rank1()});
  EXPECT_THAT(out, HasSubstr("# TYPE spindle_num_requests_running gauge\nspindle_num_requests_running 7\n"
                             "spindle_num_requests_running{dp_rank=\"0\"} 2\n"
                             "spindle_num_requests_running{dp_rank=\"1\"} 5\n"));
  EXPECT_THAT(out, HasSubstr("spindle_kv_cache_usage_ratio 0.375\n"));  // the mean
  EXPECT_THAT(out, HasSubstr("spindle_steps_total{phase=\"decode\"} 17\n"));
  EXPECT_THAT(out, HasSubstr("spindle_steps_total{dp_rank=\"1\",phase=\"decode\"} 7\n"));
  EXPECT_THAT(out, HasSubstr("spindle_ttft_seconds_bucket{le=\"+Inf\"} 4\n"));
  EXPECT_THAT(out, HasSubstr("spindle_ttft_seconds_sum 0.75\n"));
  EXPECT_THAT(out, HasSubstr("spindle_ttft_seconds_bucket{dp_rank=\"0\",le=\"0.1\"} 1\n"));
  EXPECT_THAT(out, HasSubstr("spindle_info{dp_rank=\"1\",model=\"m\",backend=\"b\"} 1\n"));
  EXPECT_THAT(out, Not(HasSubstr("spindle_info{model")));  // no total for the info metric
  EXPECT_THAT(out, HasSubstr("spindle_spec_new 4\nspindle_spec_new{dp_rank=\"1\"} 4\n"));
  // An average has no total, only its ranks' values.
  EXPECT_THAT(out, HasSubstr("# TYPE spindle_spec_accept_rate gauge\nspindle_spec_accept_rate{dp_rank=\"1\"} 0.5\n"));
  // HELP and TYPE once per family.
  size_t n = 0;
  for (size_t at = out.find("# TYPE spindle_steps_total "); at != std::string::npos;
       at = out.find("# TYPE spindle_steps_total ", at + 1)) {
    ++n;
  }
  EXPECT_EQ(n, 1u);
}

TEST(DpMetricsTest, TheRealRenderMergesEveryFamily) {
  Metrics a, b;
  a.update([](MetricsSnapshot& s) {
    s.kv_pages_total = 10;
    s.kv_pages_used = 5;
    s.generation_tokens_total = 3;
  });
  b.update([](MetricsSnapshot& s) {
    s.kv_pages_total = 10;
    s.kv_pages_used = 1;
    s.generation_tokens_total = 4;
  });
  const std::string out = merge_rank_metrics({a.render(), b.render()});
  EXPECT_THAT(out, HasSubstr("spindle_generation_tokens_total 7\n"));
  EXPECT_THAT(out, HasSubstr("spindle_kv_pages_total 20\n"));
  EXPECT_THAT(out, HasSubstr("spindle_kv_cache_usage_ratio 0.3\n"));
  // Every family of one rank's render appears in the merge, totals and per rank.
  const std::string one = a.render();
  for (size_t at = one.find("# TYPE "); at != std::string::npos; at = one.find("# TYPE ", at + 1)) {
    const size_t begin = at + 7;
    const std::string name = one.substr(begin, one.find(' ', begin) - begin);
    EXPECT_THAT(out, HasSubstr("# TYPE " + name + " ")) << name;
    EXPECT_THAT(out, HasSubstr(name + (name == "spindle_info" ? "{dp_rank=\"1\"" : "")) ) << name;
  }
}

}  // namespace
}  // namespace spindle::engine
