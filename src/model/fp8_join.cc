#include "model/fp8_join.h"

#include <fmt/format.h>

#include <algorithm>

#include "model/weight_view.h"
#include "util/error.h"

namespace spindle {
namespace {

Fp8JoinedScales refused(std::string why) {
  Fp8JoinedScales j;
  j.why_not = std::move(why);
  return j;
}

void check_part(const Fp8JoinPart& p) {
  SPINDLE_CHECK(p.rows > 0 && p.cols > 0, "join_fp8_scales: part {} is [{}, {}]", p.name, p.rows, p.cols);
  const int64_t want = fp8_scale_count(p.mode, p.rows, p.cols);
  SPINDLE_CHECK(static_cast<int64_t>(p.scales.size()) == want,
                "join_fp8_scales: part {} [{}, {}] has {} scales, {} {} scales expected", p.name, p.rows, p.cols,
                p.scales.size(), want, fp8_scale_mode_name(p.mode));
}

// "" when the parts agree on what one joined product needs (width, mode, activation scale).
std::string disagreement(std::span<const Fp8JoinPart> parts) {
  const Fp8JoinPart& first = parts.front();
  for (const Fp8JoinPart& p : parts) {
    if (p.cols != first.cols) {
      return fmt::format("{} has {} inputs, {} has {}", p.name, p.cols, first.name, first.cols);
    }
    if (p.mode != first.mode) {
      return fmt::format("{} has {} scales, {} has {}", p.name, fp8_scale_mode_name(p.mode), first.name,
                         fp8_scale_mode_name(first.mode));
    }
    // One joined product quantizes its shared input once: one static activation scale.
    if (p.input_scale != first.input_scale) {
      const auto text = [](const std::optional<float>& s) { return s ? fmt::format("{}", *s) : std::string("none"); };
      return fmt::format("static input scales differ ({} {}, {} {}): one activation quantization per joined product",
                         p.name, text(p.input_scale), first.name, text(first.input_scale));
    }
  }
  return "";
}

}  // namespace

Fp8JoinedScales join_fp8_scales(std::span<const Fp8JoinPart> parts) {
  SPINDLE_CHECK(!parts.empty(), "join_fp8_scales: no parts");
  for (const Fp8JoinPart& p : parts) check_part(p);
  if (std::string why = disagreement(parts); !why.empty()) return refused(std::move(why));
  const Fp8JoinPart& first = parts.front();
  Fp8JoinedScales j;
  j.mode = first.mode;
  j.cols = first.cols;
  j.input_scale = first.input_scale;
  for (const Fp8JoinPart& p : parts) j.rows += p.rows;
  switch (first.mode) {
    case Fp8ScaleMode::kPerTensor: {
      const bool same = std::all_of(parts.begin(), parts.end(),
                                    [&](const Fp8JoinPart& p) { return p.scales[0] == first.scales[0]; });
      if (same) {
        j.scales = {first.scales[0]};
        break;
      }
      j.mode = Fp8ScaleMode::kPerChannel;  // each part's scalar over its rows
      for (const Fp8JoinPart& p : parts) j.scales.insert(j.scales.end(), static_cast<size_t>(p.rows), p.scales[0]);
      break;
    }
    case Fp8ScaleMode::kPerChannel:
      for (const Fp8JoinPart& p : parts) j.scales.insert(j.scales.end(), p.scales.begin(), p.scales.end());
      break;
    case Fp8ScaleMode::kBlock128:
      for (size_t k = 0; k + 1 < parts.size(); ++k) {
        if (parts[k].rows % kFp8BlockSize != 0) {
          return refused(fmt::format("{} has {} rows, not a multiple of {}: its last block of 128x128 scales would "
                                     "straddle {}", parts[k].name, parts[k].rows, kFp8BlockSize, parts[k + 1].name));
        }
      }
      for (const Fp8JoinPart& p : parts) j.scales.insert(j.scales.end(), p.scales.begin(), p.scales.end());
      break;
  }
  SPINDLE_CHECK(static_cast<int64_t>(j.scales.size()) == fp8_scale_count(j.mode, j.rows, j.cols),
                "join_fp8_scales: {} joined scales for [{}, {}] {}", j.scales.size(), j.rows, j.cols,
                fp8_scale_mode_name(j.mode));
  return j;
}

}  // namespace spindle
