// CudaOps' FP8 linear weights (cuda_ops.h): placed as one slot of e4m3 codes, zero padding to the
// slot alignment and the f32 scales; q | k | v and gate | up joined into one weight where their
// scales allow (model/fp8_join.h), as 16-bit ones are; run by kernels::cuda::Fp8Linear up to 32 rows
// (kFp8StreamMaxRows: gemv_fp8, gemv_fp8_mma), and above by the
// FP8 prefill entry chosen per shape (kernels/cuda/fp8_linear_registry.h; fp8_w8a16: Fp8Linear).
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "model/cuda_ops.h"
#include "model/fp8_join.h"
#include "util/build_info.h"
#include "util/error.h"

namespace spindle {

namespace kcu = kernels::cuda;

namespace {

constexpr size_t kScaleAlign = 256;  // the scales start on the slot alignment
// "auto": each FP8 prefill entry checked and timed on the model's shapes at this many rows.
constexpr int64_t kFp8PrefillCheckRows = 512;
constexpr int kFp8PrefillCheckReps = 5;

kcu::Fp8Scale device_mode(Fp8ScaleMode mode) {
  switch (mode) {
    case Fp8ScaleMode::kPerTensor: return kcu::Fp8Scale::kPerTensor;
    case Fp8ScaleMode::kPerChannel: return kcu::Fp8Scale::kPerChannel;
    case Fp8ScaleMode::kBlock128: return kcu::Fp8Scale::kBlock128;
  }
  SPINDLE_FAIL("unknown FP8 scale mode");
}

}  // namespace

bool CudaOps::place_fp8(std::span<const WeightView> parts, Placed& p) {
  // Joined parts (q | k | v, gate | up) as one weight: their codes back to back, the joined scales
  // (model/fp8_join.h); parts that cannot share one product's scales are placed one by one.
  std::vector<std::vector<float>> part_scales;
  std::vector<Fp8JoinPart> join;
  for (const WeightView& w : parts) {
    if (w.dtype != DType::kF8E4M3) return false;  // joined parts share one dtype
    part_scales.push_back(fp8_scales_f32(w));     // throws naming the tensor when its scale does not fit
    join.push_back({w.name, w.rows(), w.cols(), w.scale->mode, part_scales.back(), w.scale->input_scale});
  }
  Fp8JoinedScales joined = join_fp8_scales(join);
  if (!joined.joined()) {
    std::vector<std::string_view> names;
    for (const WeightView& w : parts) names.push_back(w.name);
    spdlog::debug("fp8: {} placed apart: {}", fmt::join(names, " | "), joined.why_not);
    if (fp8_apart_++ == 0) fp8_apart_why_ = joined.why_not;
    return false;
  }
  if (parts.size() > 1) ++fp8_joined_;
  p.fp8_scales = std::move(joined.scales);
  p.weight = {nullptr, DType::kF8E4M3, joined.rows, joined.cols};
  p.fp8.mode = device_mode(joined.mode);
  p.fp8.out_features = joined.rows;
  p.fp8.in_features = joined.cols;
  static const std::array<std::byte, kScaleAlign> zeros{};
  size_t code_bytes = 0;
  for (const WeightView& w : parts) {
    p.parts.push_back(w.bytes);  // the host (mapped) codes, copied once into the slot at finish_loading
    code_bytes += w.bytes.size();
  }
  const size_t padded = (code_bytes + kScaleAlign - 1) / kScaleAlign * kScaleAlign;
  if (padded > code_bytes) p.parts.push_back(std::span<const std::byte>(zeros).first(padded - code_bytes));
  p.fp8_scale_offset = padded;
  p.parts.push_back(std::as_bytes(std::span<const float>(p.fp8_scales)));
  has_16bit_weights_ = true;  // its products convert x to bf16 in CublasLinear's scratch
  return true;
}

void CudaOps::finish_fp8() {
  int64_t max_out = 0, max_elements = 0;
  bool has_block_scales = false;
  for (Placed& p : placed_) {
    if (p.use != WeightUse::kLinear || p.weight.dtype != DType::kF8E4M3) continue;
    const auto* slot = static_cast<const std::byte*>(p.data);
    p.fp8.codes = reinterpret_cast<const uint8_t*>(slot);
    p.fp8.scales = reinterpret_cast<const float*>(slot + p.fp8_scale_offset);
    max_out = std::max(max_out, p.fp8.out_features);
    max_elements = std::max(max_elements, p.fp8.out_features * p.fp8.in_features);
    has_block_scales = has_block_scales || p.fp8.mode == kcu::Fp8Scale::kBlock128;
    p.fp8_scales = {};
  }
  fp8_max_out_ = max_out;
  fp8_max_elements_ = max_elements;
  fp8_has_block_ = has_block_scales;
  if (max_out == 0) return;
  spdlog::info("fp8: {} q|k|v and gate|up groups joined into one product each, {} placed one by one{}", fp8_joined_,
               fp8_apart_, fp8_apart_ > 0 ? " (" + fp8_apart_why_ + ")" : std::string());
  choose_fp8_prefill();
  // fp8_linear_'s W8A16 scratch (a bf16 copy of one weight, two for block scales) only for the
  // weights that can reach it: those whose prefill product is fp8_linear_'s own, and those the
  // streaming products cannot take (in % 16 != 0). With a cuBLASLt entry chosen for every shape it
  // holds nothing, so the joined gate|up (2I x H) costs no bf16 copy of its own.
  int64_t w8a16_elements = 0;
  bool w8a16_block = false;
  for (const Placed& p : placed_) {
    if (p.use != WeightUse::kLinear || p.weight.dtype != DType::kF8E4M3) continue;
    if (p.fp8_prefill != nullptr && p.fp8.in_features % 16 == 0) continue;
    w8a16_elements = std::max(w8a16_elements, p.fp8.out_features * p.fp8.in_features);
    w8a16_block = w8a16_block || p.fp8.mode == kcu::Fp8Scale::kBlock128;
  }
  fp8_linear_->reserve(max_out, w8a16_elements, w8a16_block);
}

void CudaOps::choose_fp8_prefill() {
  std::vector<kcu::Fp8LinearShape> shapes;
  for (const Placed& p : placed_) {
    if (p.use != WeightUse::kLinear || p.weight.dtype != DType::kF8E4M3) continue;
    const kcu::Fp8LinearShape s{p.fp8.out_features, p.fp8.in_features, p.fp8.mode};
    if (std::find(shapes.begin(), shapes.end(), s) == shapes.end()) shapes.push_back(s);
    fp8_max_in_ = std::max(fp8_max_in_, s.in_features);
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  std::map<kcu::Fp8LinearShape, std::string> chosen;
  if (fp8_prefill_kernel_ == "auto") {
    std::vector<kcu::Fp8PrefillCheck> checks;
    kcu::Fp8PrefillChecker check =
        kcu::direct_fp8_prefill_checker(kFp8PrefillCheckRows, kFp8PrefillCheckReps, prop.major, prop.minor);
    std::optional<kcu::Fp8PrefillCache> cache;
    if (!fp8_prefill_cache_dir_.empty()) {
      const std::string gpu = fmt::format("{} sm{}{}", prop.name, prop.major, prop.minor);
      cache.emplace(fp8_prefill_cache_dir_,
                    kcu::Fp8PrefillCache::make_key(build_id(), cache_fingerprint_, gpu,
                                                   kcu::fp8_prefill_library_versions(), kFp8PrefillCheckRows,
                                                   kFp8PrefillCheckReps));
      check = kcu::cached_fp8_prefill_checker(*cache, std::move(check));
    }
    for (const auto& c : kcu::choose_fp8_prefill_kernels(shapes, check, &checks)) chosen[c.shape] = c.kernel;
    if (cache) {
      spdlog::info("fp8 prefill: {} of {} checks from the cache in {}", cache->num_hits(),
                   cache->num_hits() + cache->num_misses(), fp8_prefill_cache_dir_.string());
    }
    for (const auto& c : checks) {
      spdlog::info("fp8 prefill {} on {}: {}", c.kernel, c.shape.to_string(),
               !c.unsupported_reasons.empty() ? "unavailable (" + c.unsupported_reasons.front() + ")"
               : !c.error.empty()             ? "error (" + c.error + ")"
                                              : fmt::format("{} (error {:.3g} of tolerance {:.3g}), {:.1f} us at {} rows",
                                                            c.passed ? "passed" : "FAILED", c.max_error, c.tolerance,
                                                            c.seconds * 1e6, kFp8PrefillCheckRows));
    }
  } else {
    const kcu::Fp8PrefillDescriptor& d = kcu::fp8_prefill_kernel(fp8_prefill_kernel_);  // throws listing the names
    for (const auto& s : shapes) {
      const std::vector<std::string> reasons = d.unsupported_reasons(prop.major, prop.minor, s);
      SPINDLE_CHECK(reasons.empty(), "FP8 prefill kernel {} cannot run the {} weights here: {}", d.name, s.to_string(),
                    fmt::join(reasons, "; "));
      chosen[s] = d.name;
    }
  }
  for (Placed& p : placed_) {
    if (p.use != WeightUse::kLinear || p.weight.dtype != DType::kF8E4M3) continue;
    const std::string& name = chosen.at({p.fp8.out_features, p.fp8.in_features, p.fp8.mode});
    if (name == kcu::kFp8PrefillDefault) continue;  // fp8_linear_'s own path
    auto& product = fp8_prefill_[name];
    if (!product) product = kcu::fp8_prefill_kernel(name).factory(*linear_, stream_);
    p.fp8_prefill = product.get();
  }
}

}  // namespace spindle
