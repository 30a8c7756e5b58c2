// The mixture-of-experts kernels (kernels/cuda/moe_kernels.h) against references written here
// from the definitions (HF's Qwen2-MoE / Qwen3-MoE / Mixtral blocks, kernels/cpu/moe_routing.h):
//   - routing from given logits: the ids exactly (exact ties to the lower expert index, NaNs
//     never over a number, a row of NaNs 0..k-1), top-k 1, 2 and 8 of 13 experts, with and without
//     norm_topk_prob; the weights within kWeightTolerance = 1e-5 (relative) of the float64 softmax
//     of the same logits (f32 exp and sums: a few ulp);
//   - routing from the router product (bf16, f16, f32 weights; hidden 128 takes the vector loads,
//     68 the scalar ones): the ids of the float64 logits where the k-th/(k+1)-th gap exceeds
//     kRouteMargin = 1e-4 (a closer pair may flip under f32 rounding), the weights within
//     kProductWeightTolerance = 5e-5 of the float64 softmax (the f32 logits carry ~2e-6 of
//     accumulation error over 128 terms, which the softmax passes on);
//     the router product spread over the device first (logits_scratch) gives the same bits;
//   - two identical router rows: an exact tie of their logits, won by the lower index;
//   - grouping: offsets, order (ascending within an expert) and the active list exactly equal a
//     counting sort, up to 1024 rows x top 8;
//   - the whole block (route -> group -> gate/up -> down -> combine, shared expert included)
//     against float64 sums of the same widened weights, |got - want| <= tolerance times max |want|
//     of the row: f32 experts and the 16-bit ones of width 36 (the f32 FMA kernel)
//     kProductTolerance = 2e-5 (f32 accumulation over <= 128 terms in another order: ~1e-6);
//     16-bit experts of width 40 (tensor cores, x split into hi + lo 16-bit parts)
//     kTensorBlockTolerance = 1e-4 (each product's split error is <= 2^-16 sum |w x| ~ 3.6e-5 of
//     the row's largest output at these K, ~3e-6 typically; a dropped lo part errs by ~2^-9 of
//     each term: ~1e-3); 1, 3, 17 and 300 rows (the FMA one-row and four-row kernels, the tensor
//     decode and prefill configurations); a row's output the same bits alone and inside batches of
//     12 rows (decode: top 8 of 13, experts of more than 8 rows in two passes) and 300 rows
//     (prefill) (batch invariance across the configurations);
//   - the grouped products alone at the Qwen3-30B-A3B shape (hidden 2048, expert width 768, bf16
//     and f16; 16 experts, top 4; 1, 5 and 24 rows (decode; at 24 one expert holds every row: 3
//     passes of 8) and 300 rows (prefill, one expert holding every row: 5 token tiles over 4
//     z-blocks)), each sampled output against
//     the float64 dot products of the same f32 inputs: |got - want| <= kSplitTolerance * sum |w x|
//     with kSplitTolerance = 4e-5 (2^-16 = 1.5e-5 from the split, the rest for f32 accumulation
//     over up to 2048 columns: ~3e-7 typically) per dot product; act = silu(g) u takes
//     |silu'(g) u| dg + |silu(g)| du + 1e-6 |act|;
//   - a CUDA graph of the block captured once and replayed after the routing changed (new logits
//     written to the same buffer), 5 rows (decode) and 300 (prefill): the replay matches the
//     reference of the new routing.
//   - the small-step path (route_group, gate_up_stream, down_combine; moe_kernels.h): route_group
//     gives launch_moe_route's ids and weight bits and launch_moe_group's grouping (1..32 rows; top
//     8 of 128, 2 of 8, 4 of 60, 1/2/8 of 13; bf16/f16/f32 routers; hidden 128 and 68), ids and
//     weights against float64 where the margin decides, ties to the lower index, NaNs, an expert no
//     row chooses, its ticket counter back at zero after each launch; the whole block against float64
//     with kProductTolerance (f32 FMA over f32 rows), a shared expert (Qwen2-MoE), 1..32 rows; a row
//     the same bits alone and in batches of 12 and 32; graph replay after new routing (1, 5, 32
//     rows); the streamed products alone at the Qwen3-30B-A3B shape against kSplitTolerance (an
//     upper bound: they do not split x).
// Skips when no CUDA device with cc >= 8.0 is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_skip.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/moe_kernels.h"
#include "util/error.h"
#include "util/half.h"

namespace spindle {
namespace {

namespace kcu = kernels::cuda;

constexpr double kWeightTolerance = 1e-5;
constexpr double kProductWeightTolerance = 5e-5;
constexpr double kRouteMargin = 1e-4;
constexpr double kProductTolerance = 2e-5;
constexpr double kTensorBlockTolerance = 1e-4;
constexpr double kSplitTolerance = 4e-5;

template <typename T>
kcu::DeviceBuffer to_device(const std::vector<T>& host) {
  kcu::DeviceBuffer b(std::max<size_t>(host.size() * sizeof(T), 1));
  if (!host.empty()) kcu::copy_to_device(b.data(), host.data(), host.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> to_host(const kcu::DeviceBuffer& b, size_t n) {
  std::vector<T> host(n);
  if (n > 0) kcu::copy_to_host(host.data(), b.data(), n * sizeof(T));
  return host;
}

std::vector<float> random_values(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Weights stored in `type`: the device bytes and the values they hold (widened).
struct Stored {
  std::vector<std::byte> bytes;
  std::vector<double> values;
};
Stored store(const std::vector<float>& v, kcu::WeightType type) {
  Stored s;
  s.values.resize(v.size());
  const size_t element = type == kcu::WeightType::kF32 ? 4 : 2;
  s.bytes.resize(v.size() * element);
  for (size_t i = 0; i < v.size(); ++i) {
    if (type == kcu::WeightType::kF32) {
      std::memcpy(s.bytes.data() + 4 * i, &v[i], 4);
      s.values[i] = v[i];
      continue;
    }
    const uint16_t bits = type == kcu::WeightType::kBF16 ? float_to_bf16_bits(v[i]) : float_to_fp16_bits(v[i]);
    std::memcpy(s.bytes.data() + 2 * i, &bits, 2);
    s.values[i] = type == kcu::WeightType::kBF16 ? bf16_bits_to_float(bits) : fp16_bits_to_float(bits);
  }
  return s;
}

const char* type_name(kcu::WeightType t) {
  return t == kcu::WeightType::kBF16 ? "bf16" : t == kcu::WeightType::kF16 ? "f16" : "f32";
}

// The reference routing of one row: ids by (logit descending, index ascending), NaNs last.
struct Routed {
  std::vector<int32_t> ids;
  std::vector<double> weights;
  double margin = 0;  // k-th minus (k+1)-th logit (infinity when k == E)
};
Routed reference_route(const std::vector<double>& logits, int k, bool norm) {
  const int e = static_cast<int>(logits.size());
  std::vector<int32_t> idx(static_cast<size_t>(e));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    const bool na = std::isnan(logits[a]), nb = std::isnan(logits[b]);
    if (na != nb) return nb;
    return !na && logits[a] > logits[b];
  });
  Routed r;
  r.ids.assign(idx.begin(), idx.begin() + k);
  r.margin = k < e ? logits[idx[k - 1]] - logits[idx[k]] : std::numeric_limits<double>::infinity();
  const double max = logits[idx[0]];
  double sum = 0;
  for (const double l : logits) sum += std::exp(l - max);
  double top = 0;
  for (const int32_t id : r.ids) top += r.weights.emplace_back(std::exp(logits[id] - max) / sum);
  if (norm) {
    for (double& w : r.weights) w /= top;
  }
  return r;
}

struct RouteOut {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
RouteOut route_on_device(kcu::MoeRouteParams p) {
  kcu::DeviceBuffer ids(static_cast<size_t>(p.rows * p.top_k) * 4 + 4), w(static_cast<size_t>(p.rows * p.top_k) * 4 + 4);
  p.experts = ids.as<int32_t>();
  p.weights = w.as<float>();
  kcu::launch_moe_route(p, nullptr);
  kcu::synchronize_device();
  return {to_host<int32_t>(ids, static_cast<size_t>(p.rows * p.top_k)),
          to_host<float>(w, static_cast<size_t>(p.rows * p.top_k))};
}

void expect_weights(const RouteOut& got, const Routed& want, int64_t row, int k, const std::string& what,
                    double tolerance = kWeightTolerance) {
  for (int j = 0; j < k; ++j) {
    const double g = got.weights[static_cast<size_t>(row * k + j)];
    EXPECT_NEAR(g, want.weights[static_cast<size_t>(j)], tolerance * std::fabs(want.weights[j]) + 1e-12)
        << what << " row " << row << " slot " << j;
  }
}

TEST(CudaMoeRoute, TiesNansAndTopK) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr int kE = 13;
  std::vector<std::vector<float>> rows = {
      {1, 3, 3, 0, 3, -1, 2, 2, 0.5f, 3, -4, 1, 0},      // a 4-way tie at 3, a 2-way at 2
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},            // all tied
      {nan, 1, nan, 2, -1, nan, 0, 0, 5, nan, 1, 1, -7},  // NaNs among numbers
  };
  rows.push_back(std::vector<float>(kE, nan));  // a row of NaNs: 0..k-1
  for (int i = 0; i < 3; ++i) rows.push_back(random_values(kE, 40 + i, 2.0f));
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const kcu::DeviceBuffer logits = to_device(flat);
  for (const int k : {1, 2, 8}) {
    for (const bool norm : {false, true}) {
      kcu::MoeRouteParams p;
      p.logits = logits.as<float>();
      p.rows = static_cast<int64_t>(rows.size());
      p.num_experts = kE;
      p.top_k = k;
      p.norm_topk_prob = norm;
      const RouteOut got = route_on_device(p);
      for (size_t r = 0; r < rows.size(); ++r) {
        const Routed want = reference_route(std::vector<double>(rows[r].begin(), rows[r].end()), k, norm);
        const std::string what = "top " + std::to_string(k) + (norm ? " norm" : "");
        for (int j = 0; j < k; ++j) EXPECT_EQ(got.ids[r * k + j], want.ids[j]) << what << " row " << r << " slot " << j;
        if (r != 2 && r != 3) expect_weights(got, want, static_cast<int64_t>(r), k, what);  // NaN rows: NaN weights
      }
    }
  }
}

TEST(CudaMoeRoute, RouterProductMatchesFloat64) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int64_t kRows = 17;
  constexpr int kE = 13;
  for (const int64_t hidden : {128, 68}) {
    for (const kcu::WeightType type : {kcu::WeightType::kBF16, kcu::WeightType::kF16, kcu::WeightType::kF32}) {
      const std::vector<float> x = random_values(kRows * hidden, 1, 1.0f);
      const Stored w = store(random_values(kE * hidden, 2, 0.3f), type);
      const kcu::DeviceBuffer dx = to_device(x), dw = to_device(w.bytes);
      for (const int k : {1, 2, 8}) {
        kcu::MoeRouteParams p;
        p.x = dx.as<float>();
        p.router = dw.data();
        p.router_type = type;
        p.hidden = hidden;
        p.rows = kRows;
        p.num_experts = kE;
        p.top_k = k;
        p.norm_topk_prob = k > 1;
        const RouteOut got = route_on_device(p);
        {  // the spread router product (kMoeRouteSpreadMaxRows) gives the same bits
          kcu::DeviceBuffer scratch(static_cast<size_t>(kRows * kE) * 4);
          kcu::MoeRouteParams spread = p;
          spread.logits_scratch = scratch.as<float>();
          const RouteOut again = route_on_device(spread);
          EXPECT_EQ(again.ids, got.ids) << type_name(type) << " hidden " << hidden << " top " << k;
          EXPECT_EQ(0, std::memcmp(again.weights.data(), got.weights.data(), got.weights.size() * 4))
              << type_name(type) << " hidden " << hidden << " top " << k;
        }
        int decided = 0;
        for (int64_t r = 0; r < kRows; ++r) {
          std::vector<double> logits(kE, 0.0);
          for (int e = 0; e < kE; ++e) {
            for (int64_t c = 0; c < hidden; ++c) logits[e] += double(x[r * hidden + c]) * w.values[e * hidden + c];
          }
          const Routed want = reference_route(logits, k, p.norm_topk_prob);
          if (want.margin <= kRouteMargin) continue;
          ++decided;
          const std::string what = std::string(type_name(type)) + " hidden " + std::to_string(hidden) + " top " +
                                   std::to_string(k);
          for (int j = 0; j < k; ++j) EXPECT_EQ(got.ids[r * k + j], want.ids[j]) << what << " row " << r;
          expect_weights(got, want, r, k, what, kProductWeightTolerance);
        }
        EXPECT_GE(decided, kRows - 2) << "too many rows within the margin: the test checks too little";
      }
    }
  }
}

// Two identical router rows give bit-identical logits (every expert's dot product is summed in the
// same order), so their exact tie goes to the lower index: experts 2 and 9 of 13, for k 1 and 2.
TEST(CudaMoeRoute, IdenticalRouterRowsTieToTheLowerIndex) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kE = 13;
  constexpr int64_t kHidden = 136;
  const std::vector<float> x = random_values(3 * kHidden, 5, 1.0f);
  std::vector<float> router = random_values(kE * kHidden, 6, 0.01f);
  for (int64_t c = 0; c < kHidden; ++c) router[2 * kHidden + c] = router[9 * kHidden + c] = x[c] > 0 ? 0.5f : -0.5f;
  for (const kcu::WeightType type : {kcu::WeightType::kBF16, kcu::WeightType::kF32}) {
    const Stored w = store(router, type);
    const kcu::DeviceBuffer dx = to_device(x), dw = to_device(w.bytes);
    for (const int k : {1, 2}) {
      kcu::MoeRouteParams p;
      p.x = dx.as<float>();
      p.router = dw.data();
      p.router_type = type;
      p.hidden = kHidden;
      p.rows = 1;  // row 0: sum |x| / 2 for experts 2 and 9, far above the others
      p.num_experts = kE;
      p.top_k = k;
      p.norm_topk_prob = true;
      const RouteOut got = route_on_device(p);
      EXPECT_EQ(got.ids[0], 2) << type_name(type) << " top " << k;
      if (k == 2) {
        EXPECT_EQ(got.ids[1], 9) << type_name(type);
        EXPECT_EQ(got.weights[0], got.weights[1]) << type_name(type);
        EXPECT_NEAR(got.weights[0], 0.5, 1e-6) << type_name(type);
      }
    }
  }
}

struct Grouping {
  std::vector<int32_t> offsets, order, active;
};
Grouping group_on_device(const std::vector<int32_t>& experts, int num_experts) {
  const kcu::DeviceBuffer d = to_device(experts);
  kcu::DeviceBuffer offsets((num_experts + 1) * 4), order(experts.size() * 4 + 4), active((num_experts + 1) * 4);
  kcu::launch_moe_group({d.as<int32_t>(), static_cast<int64_t>(experts.size()), num_experts, offsets.as<int32_t>(),
                         order.as<int32_t>(), active.as<int32_t>()},
                        nullptr);
  kcu::synchronize_device();
  Grouping g{to_host<int32_t>(offsets, num_experts + 1), to_host<int32_t>(order, experts.size()),
             to_host<int32_t>(active, num_experts + 1)};
  return g;
}

TEST(CudaMoeGroup, StableCountingSortByExpert) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kE = 13;
  std::mt19937 rng(7);
  for (const size_t n : {size_t{1}, size_t{2}, size_t{51}, size_t{1024 * 8}}) {
    std::vector<int32_t> experts(n);
    // Experts 3 and 11 never chosen; the rest skewed toward 0.
    for (auto& e : experts) {
      do e = static_cast<int32_t>(rng() % 13 * (rng() % 2)) % kE; while (e == 3 || e == 11);
    }
    const Grouping got = group_on_device(experts, kE);
    std::vector<int32_t> offsets(kE + 1, 0), order, active;
    for (int e = 0; e < kE; ++e) {
      for (size_t c = 0; c < n; ++c) {
        if (experts[c] == e) order.push_back(static_cast<int32_t>(c));
      }
      offsets[e + 1] = static_cast<int32_t>(order.size());
      if (offsets[e + 1] > offsets[e]) active.push_back(e);
    }
    EXPECT_EQ(got.offsets, offsets) << n << " choices";
    EXPECT_EQ(got.order, order) << n << " choices";
    EXPECT_EQ(got.active[kE], static_cast<int32_t>(active.size())) << n << " choices";
    EXPECT_EQ(std::vector<int32_t>(got.active.begin(), got.active.begin() + active.size()), active);
  }
}

// One MoE block's inputs on the host and the device: E experts with joined gate/up [2F, H] and
// down [H, F] stored back to back (the fused 3-D layout), logits given (the routing known).
struct Block {
  int num_experts = 13;
  int top_k = 2;
  int64_t rows = 0, hidden = 0, width = 0;
  kcu::WeightType type = kcu::WeightType::kBF16;
  bool shared = false;
  std::vector<float> x, logits, shared_out, shared_gate;
  Stored gate_up, down;
  kcu::DeviceBuffer dx, dlogits, dshared_out, dshared_gate, dgate_up, ddown, table;
  bool aligned16 = true;
  // Scratch and output.
  kcu::DeviceBuffer ids, weights, offsets, order, active, act, out, y, counters;

  void make(uint64_t seed) {
    const int64_t e = num_experts, h = hidden, f = width;
    x = random_values(rows * h, seed, 1.0f);
    logits = random_values(rows * e, seed + 1, 2.0f);
    gate_up = store(random_values(e * 2 * f * h, seed + 2, 0.2f), type);
    down = store(random_values(e * h * f, seed + 3, 0.2f), type);
    dx = to_device(x);
    dlogits = to_device(logits);
    dgate_up = to_device(gate_up.bytes);
    ddown = to_device(down.bytes);
    if (shared) {
      shared_out = random_values(rows * h, seed + 4, 1.0f);
      shared_gate = random_values(rows, seed + 5, 1.0f);
      dshared_out = to_device(shared_out);
      dshared_gate = to_device(shared_gate);
    }
    const size_t element = type == kcu::WeightType::kF32 ? 4 : 2;
    std::vector<const void*> ptrs(static_cast<size_t>(3 * e));
    for (int64_t i = 0; i < e; ++i) {
      const auto* gu = dgate_up.as<std::byte>() + static_cast<size_t>(i * 2 * f * h) * element;
      ptrs[i] = gu;
      ptrs[e + i] = gu + static_cast<size_t>(f * h) * element;
      ptrs[2 * e + i] = ddown.as<std::byte>() + static_cast<size_t>(i * h * f) * element;
    }
    for (const void* p : ptrs) aligned16 = aligned16 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
    table = to_device(ptrs);
    const size_t n = static_cast<size_t>(rows * top_k);
    ids.reserve(n * 4 + 4), weights.reserve(n * 4 + 4), order.reserve(n * 4 + 4);
    offsets.reserve((e + 1) * 4), active.reserve((e + 1) * 4);
    act.reserve(n * f * 4 + 4), out.reserve(n * h * 4 + 4), y.reserve(rows * h * 4 + 4);
    counters = to_device(std::vector<int32_t>(static_cast<size_t>(1 + (h + kcu::kMoeDownCombineTile - 1) /
                                                                          kcu::kMoeDownCombineTile),
                                              0));
  }

  // The small-step path: route_group -> gate_up_stream -> down_combine on `stream`.
  void run_fused(cudaStream_t stream) const {
    kcu::MoeFusedRouteParams r;
    r.route.logits = dlogits.as<float>();
    r.route.rows = rows;
    r.route.num_experts = num_experts;
    r.route.top_k = top_k;
    r.route.norm_topk_prob = true;
    r.route.experts = ids.as<int32_t>();
    r.route.weights = weights.as<float>();
    r.offsets = offsets.as<int32_t>(), r.order = order.as<int32_t>(), r.active = active.as<int32_t>();
    r.counter = counters.as<int32_t>();
    kcu::launch_moe_route_group(r, stream);
    kcu::launch_moe_gate_up_stream(grouped(true), stream);
    kcu::MoeDownCombineParams d;
    d.down = grouped(false);
    d.combine.weights = weights.as<float>();
    d.combine.shared_out = shared ? dshared_out.as<float>() : nullptr;
    d.combine.shared_gate = shared ? dshared_gate.as<float>() : nullptr;
    d.combine.rows = rows, d.combine.top_k = top_k, d.combine.hidden = hidden;
    d.combine.y = y.as<float>();
    d.tile_counters = counters.as<int32_t>() + 1;
    kcu::launch_moe_down_combine(d, stream);
  }

  kcu::MoeGroupedParams grouped(bool gate_up) const {
    kcu::MoeGroupedParams g;
    g.offsets = offsets.as<int32_t>(), g.order = order.as<int32_t>(), g.active = active.as<int32_t>();
    g.num_experts = num_experts, g.top_k = top_k, g.num_choices = rows * top_k, g.max_rows_per_expert = rows;
    g.type = type, g.aligned16 = aligned16;
    const auto* t = table.as<const void*>();
    if (gate_up) {
      g.first = t, g.second = t + num_experts, g.in_features = hidden, g.out_features = width;
      g.x = dx.as<float>(), g.y = act.as<float>();
    } else {
      g.first = t + 2 * num_experts, g.second = nullptr, g.in_features = width, g.out_features = hidden;
      g.x = act.as<float>(), g.y = out.as<float>();
    }
    return g;
  }

  // Every ticket counter back at zero (each launch must leave them so).
  void expect_counters_zero(const std::string& what) const {
    const std::vector<int32_t> c = to_host<int32_t>(counters, counters.size() / 4);
    EXPECT_EQ(std::count(c.begin(), c.end(), 0), static_cast<long>(c.size())) << what << ": a ticket counter left set";
  }

  // route -> group -> gate/up -> down -> combine on `stream`; nothing synchronizes.
  void run(cudaStream_t stream) const {
    kcu::MoeRouteParams route;
    route.logits = dlogits.as<float>();
    route.rows = rows;
    route.num_experts = num_experts;
    route.top_k = top_k;
    route.norm_topk_prob = true;
    route.experts = ids.as<int32_t>();
    route.weights = weights.as<float>();
    kcu::launch_moe_route(route, stream);
    kcu::launch_moe_group({ids.as<int32_t>(), rows * top_k, num_experts, offsets.as<int32_t>(), order.as<int32_t>(),
                           active.as<int32_t>()},
                          stream);
    kcu::MoeGroupedParams g;
    g.offsets = offsets.as<int32_t>();
    g.order = order.as<int32_t>();
    g.active = active.as<int32_t>();
    g.num_experts = num_experts;
    g.top_k = top_k;
    g.num_choices = rows * top_k;
    g.max_rows_per_expert = rows;
    g.type = type;
    g.aligned16 = aligned16;
    const auto* t = table.as<const void*>();
    g.first = t, g.second = t + num_experts;
    g.in_features = hidden, g.out_features = width;
    g.x = dx.as<float>(), g.y = act.as<float>();
    kcu::launch_moe_gate_up(g, stream);
    g.first = t + 2 * num_experts, g.second = nullptr;
    g.in_features = width, g.out_features = hidden;
    g.x = act.as<float>(), g.y = out.as<float>();
    kcu::launch_moe_down(g, stream);
    kcu::MoeCombineParams c;
    c.expert_out = out.as<float>();
    c.weights = weights.as<float>();
    c.shared_out = shared ? dshared_out.as<float>() : nullptr;
    c.shared_gate = shared ? dshared_gate.as<float>() : nullptr;
    c.rows = rows, c.top_k = top_k, c.hidden = hidden;
    c.y = y.as<float>();
    kcu::launch_moe_combine(c, stream);
  }

  // The float64 output of row r: sum_j w_j * down_e(silu(gate_e x) * up_e x) (+ the shared term).
  std::vector<double> reference(int64_t r) const {
    const int64_t e = num_experts, h = hidden, f = width;
    const Routed routed =
        reference_route(std::vector<double>(logits.begin() + r * e, logits.begin() + (r + 1) * e), top_k, true);
    std::vector<double> y(static_cast<size_t>(h), 0.0), a(static_cast<size_t>(f));
    for (int j = 0; j < top_k; ++j) {
      const int64_t id = routed.ids[j];
      const double* gu = gate_up.values.data() + id * 2 * f * h;
      for (int64_t i = 0; i < f; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < h; ++c) {
          g += gu[i * h + c] * x[r * h + c];
          u += gu[(f + i) * h + c] * x[r * h + c];
        }
        a[i] = g / (1 + std::exp(-g)) * u;
      }
      const double* d = down.values.data() + id * h * f;
      for (int64_t o = 0; o < h; ++o) {
        double s = 0;
        for (int64_t i = 0; i < f; ++i) s += d[o * f + i] * a[i];
        y[o] += routed.weights[j] * s;
      }
    }
    if (shared) {
      const double g = 1 / (1 + std::exp(-double(shared_gate[r])));
      for (int64_t o = 0; o < h; ++o) y[o] += g * shared_out[r * h + o];
    }
    return y;
  }

  // The tensor-core kernels take 16-bit experts with both widths a multiple of 8.
  double tolerance() const {
    const bool tensor = type != kcu::WeightType::kF32 && hidden % 8 == 0 && width % 8 == 0;
    return tensor ? kTensorBlockTolerance : kProductTolerance;
  }

  void expect_matches_reference(const std::string& what, double tol = 0) const {
    const std::vector<float> got = to_host<float>(y, static_cast<size_t>(rows * hidden));
    if (tol == 0) tol = tolerance();
    int bad = 0;
    for (int64_t r = 0; r < rows && bad < 5; ++r) {
      const std::vector<double> want = reference(r);
      double scale = 0;
      for (const double v : want) scale = std::max(scale, std::fabs(v));
      for (int64_t o = 0; o < hidden && bad < 5; ++o) {
        const double g = got[r * hidden + o];
        if (!(std::fabs(g - want[o]) <= tol * scale)) {
          ADD_FAILURE() << what << ": row " << r << " output " << o << " is " << g << ", float64 " << want[o];
          ++bad;
        }
      }
    }
  }
};

std::string describe(const Block& b) {
  return std::string(type_name(b.type)) + " rows " + std::to_string(b.rows) + " hidden " + std::to_string(b.hidden) +
         " width " + std::to_string(b.width) + " top " + std::to_string(b.top_k) + (b.shared ? " shared" : "");
}

TEST(CudaMoeBlock, GroupedProductsMatchFloat64) {
  SKIP_WITHOUT_CUDA_DEVICE();
  uint64_t seed = 100;
  for (const kcu::WeightType type : {kcu::WeightType::kBF16, kcu::WeightType::kF16, kcu::WeightType::kF32}) {
    for (const int k : {1, 2, 8}) {
      for (const int64_t rows : {1, 3, 17, 300}) {
        if (type != kcu::WeightType::kBF16 && rows == 300) continue;  // the 16-bit paths differ only in loads
        for (const auto& [hidden, width] : {std::pair<int64_t, int64_t>{128, 40}, {68, 36}}) {
          Block b;
          b.top_k = k, b.rows = rows, b.hidden = hidden, b.width = width, b.type = type;
          b.shared = k == 2;
          b.make(seed++);
          b.run(nullptr);
          kcu::synchronize_device();
          b.expect_matches_reference(describe(b));
        }
      }
    }
  }
}

void row_alone_equals_row_in_batch(int64_t batch_rows) {
  Block batch;
  batch.top_k = 8, batch.rows = batch_rows, batch.hidden = 128, batch.width = 40;
  batch.make(7);
  batch.run(nullptr);
  kcu::synchronize_device();
  const std::vector<float> all = to_host<float>(batch.y, static_cast<size_t>(batch_rows * 128));
  for (const int64_t r : {int64_t{0}, int64_t{5}, batch_rows - 1}) {
    Block alone;
    alone.top_k = 8, alone.rows = 1, alone.hidden = 128, alone.width = 40;
    alone.make(7);  // the same experts; then row r's x and logits
    alone.x.assign(batch.x.begin() + r * 128, batch.x.begin() + (r + 1) * 128);
    alone.logits.assign(batch.logits.begin() + r * 13, batch.logits.begin() + (r + 1) * 13);
    kcu::copy_to_device(alone.dx.data(), alone.x.data(), 128 * 4);
    kcu::copy_to_device(alone.dlogits.data(), alone.logits.data(), 13 * 4);
    alone.run(nullptr);
    kcu::synchronize_device();
    const std::vector<float> one = to_host<float>(alone.y, 128);
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + r * 128, 128 * 4)) << "row " << r << " of " << batch_rows;
  }
}

// The block captured once in a CUDA graph replays correctly after the routing changed: the counts
// and offsets are read on the device, never baked into the graph. `fused`: the small-step path
// (run_fused; its ticket counters back at 0 after every replay), else the general one.
void graph_replay_follows_new_routing(int64_t rows, bool fused) {
  Block b;
  b.top_k = 2, b.rows = rows, b.hidden = 128, b.width = 40, b.shared = true;
  b.make(fused ? 31 : 11);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  if (fused) {
    b.run_fused(stream);
  } else {
    b.run(stream);
  }
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const uint32_t logits_seed = fused ? 800 : 500, x_seed = fused ? 900 : 600;
  for (int round = 0; round < 3; ++round) {
    if (round > 0) {  // new routing (and new inputs) in the same buffers
      b.logits = random_values(b.logits.size(), logits_seed + round, 2.0f);
      b.x = random_values(b.x.size(), x_seed + round, 1.0f);
      kcu::copy_to_device(b.dlogits.data(), b.logits.data(), b.logits.size() * 4);
      kcu::copy_to_device(b.dx.data(), b.x.data(), b.x.size() * 4);
    }
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::string what = std::string(fused ? "small-step " : "") + "graph replay, " + std::to_string(rows) +
                             " rows, round " + std::to_string(round);
    if (fused) {
      b.expect_matches_reference(what, kProductTolerance);
      b.expect_counters_zero(what);
    } else {
      b.expect_matches_reference(what);
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// A row computes the same bits alone (one row per expert: the tensor decode configuration) as in
// a batch of 12 (decode, 8 rows at a time, other rows beside it) and of 300 (the prefill
// configuration: 64-row tiles).
TEST(CudaMoeBlock, RowAloneEqualsRowInBatch) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const int64_t batch_rows : {12, 300}) {
    row_alone_equals_row_in_batch(batch_rows);
  }
}

TEST(CudaMoeBlock, GraphReplayFollowsNewRouting) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const int64_t rows : {5, 300}) graph_replay_follows_new_routing(rows, false);
}

// The grouped products alone at the Qwen3-30B-A3B expert shape (K 2048 for gate/up, 768 for
// down), 16 experts in one joined [E, 2F, H] gate/up and [E, H, F] down, weights kept as 16-bit
// bits (widened on the fly: the float64 copy would be 600 MB).
struct WideExperts {
  static constexpr int kExperts = 16;
  static constexpr int64_t kHidden = 2048, kWidth = 768;
  kcu::WeightType type;
  std::vector<uint16_t> gate_up, down;
  kcu::DeviceBuffer dgate_up, ddown, table;

  explicit WideExperts(kcu::WeightType t) : type(t) {
    const int64_t e = kExperts, f = kWidth, h = kHidden;
    auto bits = [&](size_t n, uint64_t seed) {
      const std::vector<float> v = random_values(n, seed, 0.03f);
      std::vector<uint16_t> b(n);
      for (size_t i = 0; i < n; ++i) {
        b[i] = type == kcu::WeightType::kBF16 ? float_to_bf16_bits(v[i]) : float_to_fp16_bits(v[i]);
      }
      return b;
    };
    gate_up = bits(static_cast<size_t>(e * 2 * f * h), 71);
    down = bits(static_cast<size_t>(e * h * f), 72);
    dgate_up = to_device(gate_up);
    ddown = to_device(down);
    std::vector<const void*> ptrs(static_cast<size_t>(3 * e));
    for (int64_t i = 0; i < e; ++i) {
      ptrs[i] = dgate_up.as<uint16_t>() + i * 2 * f * h;
      ptrs[e + i] = dgate_up.as<uint16_t>() + (i * 2 * f + f) * h;
      ptrs[2 * e + i] = ddown.as<uint16_t>() + i * h * f;
    }
    table = to_device(ptrs);
  }
  double value(uint16_t b) const {
    return type == kcu::WeightType::kBF16 ? bf16_bits_to_float(b) : fp16_bits_to_float(b);
  }
  // sum_c w[c] x[c] and sum_c |w[c] x[c]| over n columns.
  template <typename X>
  std::pair<double, double> dot(const uint16_t* w, const X* x, int64_t n) const {
    double s = 0, a = 0;
    for (int64_t c = 0; c < n; ++c) {
      const double t = value(w[c]) * double(x[c]);
      s += t;
      a += std::fabs(t);
    }
    return {s, a};
  }
};

// Runs gate/up and down over `rows` rows routed by `experts` [rows, top_k] (grouped on the
// device) and checks up to 48 grouped positions spread over all of them (first and last included).
void check_wide_products(const WideExperts& w, int64_t rows, int top_k, const std::vector<int32_t>& experts,
                         uint64_t seed, bool stream = false) {
  const int64_t h = WideExperts::kHidden, f = WideExperts::kWidth, n = rows * top_k;
  const int e_count = WideExperts::kExperts;
  const std::vector<float> x = random_values(static_cast<size_t>(rows * h), seed, 1.0f);
  const kcu::DeviceBuffer dx = to_device(x), dids = to_device(experts);
  kcu::DeviceBuffer offsets((e_count + 1) * 4), order(n * 4), active((e_count + 1) * 4), act(n * f * 4),
      out(n * h * 4);
  kcu::launch_moe_group({dids.as<int32_t>(), n, e_count, offsets.as<int32_t>(), order.as<int32_t>(),
                         active.as<int32_t>()},
                        nullptr);
  kcu::MoeGroupedParams g;
  g.offsets = offsets.as<int32_t>(), g.order = order.as<int32_t>(), g.active = active.as<int32_t>();
  g.num_experts = e_count, g.top_k = top_k, g.num_choices = n, g.max_rows_per_expert = rows;
  g.type = w.type, g.aligned16 = true;
  const auto* t = w.table.as<const void*>();
  g.first = t, g.second = t + e_count, g.in_features = h, g.out_features = f;
  g.x = dx.as<float>(), g.y = act.as<float>();
  ASSERT_TRUE(kcu::moe_grouped_uses_tensor_cores(g));
  const kcu::DeviceBuffer route_weights = to_device(std::vector<float>(static_cast<size_t>(n), 1.0f / top_k));
  kcu::DeviceBuffer y(static_cast<size_t>(rows * h) * 4);
  const kcu::DeviceBuffer counters = to_device(std::vector<int32_t>(h / kcu::kMoeDownCombineTile, 0));
  if (stream) {
    ASSERT_TRUE(kcu::moe_fused_supported(rows, e_count, w.type, true, h, f, dx.as<float>()));
    kcu::launch_moe_gate_up_stream(g, nullptr);
  } else {
    kcu::launch_moe_gate_up(g, nullptr);
  }
  g.first = t + 2 * e_count, g.second = nullptr, g.in_features = f, g.out_features = h;
  g.x = act.as<float>(), g.y = out.as<float>();
  ASSERT_TRUE(kcu::moe_grouped_uses_tensor_cores(g));
  if (stream) {  // out by choice is down_combine's scratch: checked as launch_moe_down's
    kcu::MoeDownCombineParams d;
    d.down = g;
    d.combine.weights = route_weights.as<float>();
    d.combine.rows = rows, d.combine.top_k = top_k, d.combine.hidden = h, d.combine.y = y.as<float>();
    d.tile_counters = counters.as<int32_t>();
    kcu::launch_moe_down_combine(d, nullptr);
  } else {
    kcu::launch_moe_down(g, nullptr);
  }
  kcu::synchronize_device();
  const std::vector<int32_t> ord = to_host<int32_t>(order, static_cast<size_t>(n));
  const std::vector<float> a = to_host<float>(act, static_cast<size_t>(n * f));
  const std::vector<float> o = to_host<float>(out, static_cast<size_t>(n * h));
  const std::string what =
      std::string(type_name(w.type)) + " rows " + std::to_string(rows) + (stream ? " (stream kernels)" : "");
  const int64_t samples = std::min<int64_t>(n, 48);
  int bad = 0;
  for (int64_t s = 0; s < samples && bad < 5; ++s) {
    const int64_t i = samples == 1 ? 0 : s * (n - 1) / (samples - 1);  // grouped position
    const int64_t c = ord[i], r = c / top_k, e = experts[c];
    const uint16_t* gu = w.gate_up.data() + e * 2 * f * h;
    for (int64_t j = 0; j < f && bad < 5; ++j) {
      const auto [gs, ga] = w.dot(gu + j * h, x.data() + r * h, h);
      const auto [us, ua] = w.dot(gu + (f + j) * h, x.data() + r * h, h);
      const double sig = 1 / (1 + std::exp(-gs)), silu = gs * sig, dsilu = sig * (1 + gs * (1 - sig));
      const double want = silu * us;
      const double tol = kSplitTolerance * (std::fabs(dsilu * us) * ga + std::fabs(silu) * ua) + 1e-6 * std::fabs(want);
      const double got = a[i * f + j];
      if (!(std::fabs(got - want) <= tol)) {
        ADD_FAILURE() << what << " gate/up: position " << i << " feature " << j << " is " << got << ", float64 "
                      << want << " (tolerance " << tol << ")";
        ++bad;
      }
    }
    const uint16_t* d = w.down.data() + e * h * f;
    for (int64_t j = 0; j < h && bad < 5; ++j) {
      const auto [ds, da] = w.dot(d + j * f, a.data() + i * f, f);
      const double got = o[c * h + j];
      if (!(std::fabs(got - ds) <= kSplitTolerance * da)) {
        ADD_FAILURE() << what << " down: choice " << c << " output " << j << " is " << got << ", float64 " << ds
                      << " (tolerance " << kSplitTolerance * da << ")";
        ++bad;
      }
    }
  }
}

TEST(CudaMoeProducts, TensorCoresAtQwen3ShapeMatchFloat64) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kTopK = 4;
  for (const kcu::WeightType type : {kcu::WeightType::kBF16, kcu::WeightType::kF16}) {
    const WideExperts w(type);
    std::mt19937 rng(3);
    for (const int64_t rows : {1, 5, 24, 300}) {
      if (type == kcu::WeightType::kF16 && rows != 24 && rows != 300) continue;
      std::vector<int32_t> experts(static_cast<size_t>(rows * kTopK));
      for (int64_t r = 0; r < rows; ++r) {  // distinct experts per row; from 24 rows expert 0 in every row
        std::vector<int32_t> ids(WideExperts::kExperts);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin() + (rows >= 24 ? 1 : 0), ids.end(), rng);
        std::copy(ids.begin(), ids.begin() + kTopK, experts.begin() + r * kTopK);
      }
      check_wide_products(w, rows, kTopK, experts, 900 + static_cast<uint64_t>(rows));
    }
  }
}

TEST(CudaMoeProducts, StreamKernelsAtQwen3ShapeMatchFloat64) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kTopK = 4;
  for (const kcu::WeightType type : {kcu::WeightType::kBF16, kcu::WeightType::kF16}) {
    const WideExperts w(type);
    std::mt19937 rng(4);
    for (const int64_t rows : {1, 5, 24, 32}) {
      if (type == kcu::WeightType::kF16 && rows != 5) continue;
      std::vector<int32_t> experts(static_cast<size_t>(rows * kTopK));
      for (int64_t r = 0; r < rows; ++r) {  // from 24 rows expert 0 in every row (row tiles of 2 and 4, many passes)
        std::vector<int32_t> ids(WideExperts::kExperts);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin() + (rows >= 24 ? 1 : 0), ids.end(), rng);
        std::copy(ids.begin(), ids.begin() + kTopK, experts.begin() + r * kTopK);
      }
      check_wide_products(w, rows, kTopK, experts, 950 + static_cast<uint64_t>(rows), /*stream=*/true);
    }
  }
}

// ---- The small-step path (moe_kernels.h: route_group, gate_up_stream, down_combine) -------------

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  Grouping group;
  int32_t counter = 0;
};

// launch_moe_route + launch_moe_group, or launch_moe_route_group (launched twice: the second launch
// must find its counter reset and give the same result).
Routing routing_on_device(kcu::MoeRouteParams p, bool fused) {
  const size_t n = static_cast<size_t>(p.rows * p.top_k), e = static_cast<size_t>(p.num_experts);
  kcu::DeviceBuffer ids(n * 4 + 4), w(n * 4 + 4), offsets((e + 1) * 4), order(n * 4 + 4), active((e + 1) * 4),
      scratch(static_cast<size_t>(p.rows) * e * 4 + 4);
  const kcu::DeviceBuffer counter = to_device(std::vector<int32_t>{0});
  p.experts = ids.as<int32_t>();
  p.weights = w.as<float>();
  p.logits_scratch = p.logits == nullptr ? scratch.as<float>() : nullptr;
  if (fused) {
    kcu::MoeFusedRouteParams f;
    f.route = p;
    f.offsets = offsets.as<int32_t>(), f.order = order.as<int32_t>(), f.active = active.as<int32_t>();
    f.counter = counter.as<int32_t>();
    kcu::launch_moe_route_group(f, nullptr);
    kcu::launch_moe_route_group(f, nullptr);
  } else {
    kcu::launch_moe_route(p, nullptr);
    kcu::launch_moe_group({ids.as<int32_t>(), static_cast<int64_t>(n), p.num_experts, offsets.as<int32_t>(),
                           order.as<int32_t>(), active.as<int32_t>()},
                          nullptr);
  }
  kcu::synchronize_device();
  Routing r{to_host<int32_t>(ids, n), to_host<float>(w, n),
            Grouping{to_host<int32_t>(offsets, e + 1), to_host<int32_t>(order, n), to_host<int32_t>(active, e + 1)},
            to_host<int32_t>(counter, 1)[0]};
  r.group.active.resize(static_cast<size_t>(r.group.active[e]));  // the list, then its count (checked equal above)
  r.group.active.push_back(to_host<int32_t>(active, e + 1)[e]);
  return r;
}

// The grouping a counting sort of `ids` gives (launch_moe_group's definition).
void expect_grouping_of(const Routing& got, int num_experts, const std::string& what) {
  std::vector<int32_t> offsets(static_cast<size_t>(num_experts) + 1, 0), order, active;
  for (int e = 0; e < num_experts; ++e) {
    for (size_t c = 0; c < got.ids.size(); ++c) {
      if (got.ids[c] == e) order.push_back(static_cast<int32_t>(c));
    }
    offsets[e + 1] = static_cast<int32_t>(order.size());
    if (offsets[e + 1] > offsets[e]) active.push_back(e);
  }
  active.push_back(static_cast<int32_t>(active.size()));
  EXPECT_EQ(got.group.offsets, offsets) << what;
  EXPECT_EQ(got.group.order, order) << what;
  EXPECT_EQ(got.group.active, active) << what;
}

// route_group from the router product: the same ids and weight bits as launch_moe_route, the same
// grouping as launch_moe_group, ids and weights against float64 where the margin decides, the
// counter left at zero; 1..32 rows, top 8 of 128 (Qwen3-MoE), 2 of 8 (Mixtral), 4 of 60 (Qwen2-MoE),
// 1, 2 and 8 of 13; hidden 128 (vector loads) and 68 (scalar).
TEST(CudaMoeFused, RouteGroupEqualsRouteThenGroup) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int experts, top_k;
  };
  uint64_t seed = 300;
  for (const Case c : {Case{128, 8}, Case{8, 2}, Case{60, 4}, Case{13, 1}, Case{13, 2}, Case{13, 8}}) {
    for (const int64_t hidden : {128, 68}) {
      for (const kcu::WeightType type : {kcu::WeightType::kBF16, kcu::WeightType::kF16, kcu::WeightType::kF32}) {
        if (type != kcu::WeightType::kBF16 && (c.experts != 128 || hidden != 128)) continue;
        const Stored w = store(random_values(static_cast<size_t>(c.experts * hidden), seed++, 0.3f), type);
        const kcu::DeviceBuffer dw = to_device(w.bytes);
        for (const int64_t rows : {1, 2, 3, 4, 5, 8, 13, 17, 31, 32}) {
          const std::vector<float> x = random_values(static_cast<size_t>(rows * hidden), seed++, 1.0f);
          const kcu::DeviceBuffer dx = to_device(x);
          kcu::MoeRouteParams p;
          p.x = dx.as<float>(), p.router = dw.data(), p.router_type = type, p.hidden = hidden;
          p.rows = rows, p.num_experts = c.experts, p.top_k = c.top_k, p.norm_topk_prob = c.top_k > 1;
          const std::string what = std::string(type_name(type)) + " top " + std::to_string(c.top_k) + " of " +
                                   std::to_string(c.experts) + " hidden " + std::to_string(hidden) + " rows " +
                                   std::to_string(rows);
          const Routing general = routing_on_device(p, false), fused = routing_on_device(p, true);
          EXPECT_EQ(fused.ids, general.ids) << what;
          EXPECT_EQ(0, std::memcmp(fused.weights.data(), general.weights.data(), fused.weights.size() * 4)) << what;
          EXPECT_EQ(fused.group.offsets, general.group.offsets) << what;
          EXPECT_EQ(fused.group.order, general.group.order) << what;
          EXPECT_EQ(fused.group.active, general.group.active) << what;
          EXPECT_EQ(fused.counter, 0) << what;
          expect_grouping_of(fused, c.experts, what);
          for (int64_t r = 0; r < rows; ++r) {
            std::vector<double> logits(static_cast<size_t>(c.experts), 0.0);
            for (int e = 0; e < c.experts; ++e) {
              for (int64_t k = 0; k < hidden; ++k) logits[e] += double(x[r * hidden + k]) * w.values[e * hidden + k];
            }
            const Routed want = reference_route(logits, c.top_k, p.norm_topk_prob);
            if (want.margin <= kRouteMargin) continue;
            for (int j = 0; j < c.top_k; ++j) EXPECT_EQ(fused.ids[r * c.top_k + j], want.ids[j]) << what << " row " << r;
            expect_weights(RouteOut{fused.ids, fused.weights}, want, r, c.top_k, what, kProductWeightTolerance);
          }
        }
      }
    }
  }
}

// route_group from given logits: exact ties to the lower index, NaNs never over a number, a row of
// NaNs 0..k-1 (the TiesNansAndTopK rows), and an expert no row chooses.
TEST(CudaMoeFused, RouteGroupTiesAndNans) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr int kE = 13;
  std::vector<std::vector<float>> rows = {
      {1, 3, 3, 0, 3, -1, 2, 2, 0.5f, 3, -4, 1, 0},
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      {nan, 1, nan, 2, -1, nan, 0, 0, 5, nan, 1, 1, -7},
  };
  rows.push_back(std::vector<float>(kE, nan));
  for (int i = 0; i < 3; ++i) rows.push_back(random_values(kE, 60 + i, 2.0f));
  for (auto& r : rows) r[kE - 1] = -1e30f;  // expert 12: chosen by no row (a NaN row's NaNs still rank lower)
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const kcu::DeviceBuffer logits = to_device(flat);
  for (const int k : {1, 2, 8}) {
    for (const bool norm : {false, true}) {
      kcu::MoeRouteParams p;
      p.logits = logits.as<float>();
      p.rows = static_cast<int64_t>(rows.size());
      p.num_experts = kE;
      p.top_k = k;
      p.norm_topk_prob = norm;
      const std::string what = "top " + std::to_string(k) + (norm ? " norm" : "");
      const Routing got = routing_on_device(p, true);
      for (size_t r = 0; r < rows.size(); ++r) {
        const Routed want = reference_route(std::vector<double>(rows[r].begin(), rows[r].end()), k, norm);
        for (int j = 0; j < k; ++j) EXPECT_EQ(got.ids[r * k + j], want.ids[j]) << what << " row " << r << " slot " << j;
        if (r != 2 && r != 3) expect_weights(RouteOut{got.ids, got.weights}, want, static_cast<int64_t>(r), k, what);
      }
      expect_grouping_of(got, kE, what);
      EXPECT_EQ(got.group.offsets[kE], got.group.offsets[kE - 1]) << what << ": expert 12 chosen";
      EXPECT_EQ(got.counter, 0) << what;
    }
  }
}

// Two identical router rows through route_group: the exact tie goes to the lower index.
TEST(CudaMoeFused, IdenticalRouterRowsTieToTheLowerIndex) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kE = 13;
  constexpr int64_t kHidden = 136;
  const std::vector<float> x = random_values(kHidden, 5, 1.0f);
  std::vector<float> router = random_values(kE * kHidden, 6, 0.01f);
  for (int64_t c = 0; c < kHidden; ++c) router[2 * kHidden + c] = router[9 * kHidden + c] = x[c] > 0 ? 0.5f : -0.5f;
  const Stored w = store(router, kcu::WeightType::kBF16);
  const kcu::DeviceBuffer dx = to_device(x), dw = to_device(w.bytes);
  kcu::MoeRouteParams p;
  p.x = dx.as<float>(), p.router = dw.data(), p.hidden = kHidden;
  p.rows = 1, p.num_experts = kE, p.top_k = 2, p.norm_topk_prob = true;
  const Routing got = routing_on_device(p, true);
  EXPECT_EQ(got.ids[0], 2);
  EXPECT_EQ(got.ids[1], 9);
  EXPECT_EQ(got.weights[0], got.weights[1]);
  EXPECT_EQ(got.group.order, (std::vector<int32_t>{0, 1}));
}

// The whole block through the small-step path against float64 (f32 FMA products: kProductTolerance),
// 1..32 rows: top 1, 2 (with a shared expert) and 8 of 13, 8 of 128 (Qwen3-MoE), 2 of 8 (Mixtral),
// 4 of 60 with a shared expert (Qwen2-MoE); the last expert chosen by no row, row 0 an exact tie of
// every logit (experts 0..k-1, equal weights); the counters left at zero.
TEST(CudaMoeFused, BlockMatchesFloat64) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int experts, top_k;
    bool shared;
  };
  uint64_t seed = 700;
  for (const Case c : {Case{13, 1, false}, Case{13, 2, true}, Case{13, 8, false}, Case{128, 8, false},
                       Case{8, 2, false}, Case{60, 4, true}}) {
    for (const kcu::WeightType type : {kcu::WeightType::kBF16, kcu::WeightType::kF16}) {
      for (const int64_t rows : {1, 2, 3, 5, 8, 12, 17, 31, 32}) {
        if (type == kcu::WeightType::kF16 && rows != 3 && rows != 32) continue;
        for (const auto& [hidden, width] : {std::pair<int64_t, int64_t>{128, 40}, {72, 48}}) {
          Block b;
          b.num_experts = c.experts, b.top_k = c.top_k, b.rows = rows, b.hidden = hidden, b.width = width;
          b.type = type, b.shared = c.shared;
          b.make(seed++);
          for (int64_t r = 0; r < rows; ++r) b.logits[r * c.experts + c.experts - 1] = -1e4f;  // never chosen
          std::fill(b.logits.begin(), b.logits.begin() + c.experts, 0.5f);  // row 0: all tied
          kcu::copy_to_device(b.dlogits.data(), b.logits.data(), b.logits.size() * 4);
          ASSERT_TRUE(kcu::moe_fused_supported(rows, c.experts, type, b.aligned16, hidden, width, b.dx.as<float>()));
          b.run_fused(nullptr);
          kcu::synchronize_device();
          const std::string what = "small-step " + describe(b) + " of " + std::to_string(c.experts);
          b.expect_matches_reference(what, kProductTolerance);
          b.expect_counters_zero(what);
          const std::vector<int32_t> active = to_host<int32_t>(b.active, static_cast<size_t>(c.experts + 1));
          EXPECT_TRUE(std::find(active.begin(), active.begin() + active[c.experts], c.experts - 1) ==
                      active.begin() + active[c.experts])
              << what << ": the last expert was chosen";
        }
      }
    }
  }
}

// Within the small-step path a row computes the same bits alone as in a batch of 12 or 32 (rows of
// an expert in tiles of 4, 2 and 1 there, 1 alone).
TEST(CudaMoeFused, RowAloneEqualsRowInBatch) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const int64_t batch_rows : {12, 32}) {
    Block batch;
    batch.top_k = 8, batch.rows = batch_rows, batch.hidden = 128, batch.width = 40, batch.shared = true;
    batch.make(17);
    batch.run_fused(nullptr);
    kcu::synchronize_device();
    const std::vector<float> all = to_host<float>(batch.y, static_cast<size_t>(batch_rows * 128));
    for (const int64_t r : {int64_t{0}, int64_t{5}, batch_rows - 1}) {
      Block alone;
      alone.top_k = 8, alone.rows = 1, alone.hidden = 128, alone.width = 40, alone.shared = true;
      alone.make(17);
      alone.x.assign(batch.x.begin() + r * 128, batch.x.begin() + (r + 1) * 128);
      alone.logits.assign(batch.logits.begin() + r * 13, batch.logits.begin() + (r + 1) * 13);
      alone.shared_out.assign(batch.shared_out.begin() + r * 128, batch.shared_out.begin() + (r + 1) * 128);
      alone.shared_gate.assign(batch.shared_gate.begin() + r, batch.shared_gate.begin() + r + 1);
      kcu::copy_to_device(alone.dx.data(), alone.x.data(), 128 * 4);
      kcu::copy_to_device(alone.dlogits.data(), alone.logits.data(), 13 * 4);
      kcu::copy_to_device(alone.dshared_out.data(), alone.shared_out.data(), 128 * 4);
      kcu::copy_to_device(alone.dshared_gate.data(), alone.shared_gate.data(), 4);
      alone.run_fused(nullptr);
      kcu::synchronize_device();
      const std::vector<float> one = to_host<float>(alone.y, 128);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + r * 128, 128 * 4)) << "row " << r << " of " << batch_rows;
    }
  }
}

// The small-step block captured once in a CUDA graph replays correctly after the routing changed.
TEST(CudaMoeFused, GraphReplayFollowsNewRouting) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const int64_t rows : {1, 5, 32}) graph_replay_follows_new_routing(rows, true);
}

TEST(CudaMoeFused, BadParamsThrow) {
  kcu::MoeFusedRouteParams p;
  p.route.rows = kcu::kMoeFusedMaxRows + 1, p.route.num_experts = 8, p.route.top_k = 2;
  EXPECT_THROW(kcu::launch_moe_route_group(p, nullptr), Error);
  p.route.rows = 1;  // no counter, no logits
  EXPECT_THROW(kcu::launch_moe_route_group(p, nullptr), Error);
  EXPECT_FALSE(kcu::moe_fused_supported(1, 8, kcu::WeightType::kF32, true, 64, 64, nullptr));
  EXPECT_FALSE(kcu::moe_fused_supported(kcu::kMoeFusedMaxRows + 1, 8, kcu::WeightType::kBF16, true, 64, 64, nullptr));
}

TEST(CudaMoeRoute, BadParamsThrow) {
  kcu::MoeRouteParams p;
  p.rows = 1, p.num_experts = 4, p.top_k = 5;
  EXPECT_THROW(kcu::launch_moe_route(p, nullptr), Error);
  p.top_k = 2;  // no logits, no router
  EXPECT_THROW(kcu::launch_moe_route(p, nullptr), Error);
}

}  // namespace
}  // namespace spindle
