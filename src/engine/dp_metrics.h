// /metrics with data parallelism: the ranks' Prometheus texts (each rank's Metrics::render())
// merged into one exposition, so every engine metric, present or added later, appears per rank
// and in total without a list of names to keep in step.
//
// For every metric family, in the order rank 0 renders them (families only other ranks have
// follow): its HELP and TYPE once, then the total series (the family's label sets without
// dp_rank, summed over the ranks), then every rank's series with dp_rank="R" as the first label.
// Exceptions: spindle_info has no total (ranks may choose different backends), nor has a gauge
// whose name ends in _rate or _length (a per-rank average such as the speculative accept rate;
// its counters' totals give the pool-wide figure), and a gauge whose name ends in _ratio totals
// to the mean over the ranks (the ranks' pools are equal-sized, so the mean is the pool-wide
// ratio), and spindle_healthy totals to 1 while any rank is healthy (the server serves). Totals come first in each family, so a scraper that takes
// the first series of a family (the Gateway API Inference Extension's endpoint picker with a
// metric spec without labels) reads the total. In PromQL select totals with {dp_rank=""}.
#pragma once

#include <string>
#include <vector>

namespace spindle::engine {

// rank_texts[r]: rank r's exposition (text format 0.0.4: "# HELP", "# TYPE", then samples
// "name value" or "name{labels} value"). Lines of another form pass through under their family.
std::string merge_rank_metrics(const std::vector<std::string>& rank_texts);

}  // namespace spindle::engine
