// join_fp8_scales (model/fp8_join.h): every rule of joining FP8 parts that share their input.
// The check is the scale modes' definition (fp8_config.h), written here independently: for every
// element (o, i) of the joined weight, the joined scale read in the joined mode must equal the scale
// of the part that row came from, read in the part's mode at (o - the part's first row, i): then
// dequant(joined)[o, i] = dequant(part)[o - offset, i] exactly (the codes are the parts' rows back
// to back). Exact equality (no tolerance): a join only copies floats. Refusals: the reason names
// what differs, and nothing is joined.
#include "model/fp8_join.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "util/error.h"

namespace spindle {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBlock = 128;

int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

// The scale of element (o, i) of a weight [rows, cols] in `mode` (fp8_config.h's definition).
float scale_at(Fp8ScaleMode mode, const std::vector<float>& s, int64_t o, int64_t i, int64_t cols) {
  switch (mode) {
    case Fp8ScaleMode::kPerTensor: return s.at(0);
    case Fp8ScaleMode::kPerChannel: return s.at(static_cast<size_t>(o));
    case Fp8ScaleMode::kBlock128: return s.at(static_cast<size_t>((o / kBlock) * blocks(cols) + i / kBlock));
  }
  return 0;
}

size_t count(Fp8ScaleMode mode, int64_t rows, int64_t cols) {
  switch (mode) {
    case Fp8ScaleMode::kPerTensor: return 1;
    case Fp8ScaleMode::kPerChannel: return static_cast<size_t>(rows);
    case Fp8ScaleMode::kBlock128: return static_cast<size_t>(blocks(rows) * blocks(cols));
  }
  return 0;
}

struct Part {
  std::string name;
  int64_t rows, cols;
  Fp8ScaleMode mode;
  std::vector<float> scales;
  std::optional<float> input_scale;
};

// A part with distinct random scales (seeded per name).
Part part(std::string name, int64_t rows, int64_t cols, Fp8ScaleMode mode, std::optional<float> input = {}) {
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(name)));
  std::uniform_real_distribution<float> u(1e-3f, 4e-3f);
  Part p{std::move(name), rows, cols, mode, std::vector<float>(count(mode, rows, cols)), input};
  for (float& s : p.scales) s = u(rng);
  return p;
}

Fp8JoinedScales join(const std::vector<Part>& parts) {
  std::vector<Fp8JoinPart> in;
  for (const Part& p : parts) in.push_back({p.name, p.rows, p.cols, p.mode, p.scales, p.input_scale});
  return join_fp8_scales(in);
}

// Every element of the joined weight carries its part's scale (the header's check).
void expect_same_dequantization(const std::vector<Part>& parts, const Fp8JoinedScales& j) {
  ASSERT_TRUE(j.joined()) << j.why_not;
  ASSERT_EQ(j.scales.size(), count(j.mode, j.rows, j.cols));
  int64_t offset = 0;
  for (const Part& p : parts) {
    ASSERT_EQ(p.cols, j.cols);
    for (int64_t o = 0; o < p.rows; ++o) {
      for (int64_t i = 0; i < p.cols; ++i) {
        ASSERT_EQ(scale_at(j.mode, j.scales, offset + o, i, j.cols), scale_at(p.mode, p.scales, o, i, p.cols))
            << p.name << " row " << o << " col " << i;
      }
    }
    offset += p.rows;
  }
  EXPECT_EQ(offset, j.rows);
}

TEST(Fp8Join, OnePartIsItself) {
  for (Fp8ScaleMode mode : {Fp8ScaleMode::kPerTensor, Fp8ScaleMode::kPerChannel, Fp8ScaleMode::kBlock128}) {
    const std::vector<Part> parts{part("w", 200, 300, mode, 0.5f)};
    const Fp8JoinedScales j = join(parts);
    ASSERT_TRUE(j.joined()) << j.why_not;
    EXPECT_EQ(j.mode, mode);
    EXPECT_EQ(j.scales, parts[0].scales);
    EXPECT_EQ(j.rows, 200);
    EXPECT_EQ(j.cols, 300);
    EXPECT_EQ(j.input_scale, std::optional<float>(0.5f));
  }
}

TEST(Fp8Join, PerChannelConcatenates) {  // q | k | v of a GQA layer, 16 inputs
  const std::vector<Part> parts{part("q", 64, 16, Fp8ScaleMode::kPerChannel), part("k", 16, 16, Fp8ScaleMode::kPerChannel),
                                part("v", 16, 16, Fp8ScaleMode::kPerChannel)};
  const Fp8JoinedScales j = join(parts);
  EXPECT_EQ(j.mode, Fp8ScaleMode::kPerChannel);
  EXPECT_EQ(j.rows, 96);
  expect_same_dequantization(parts, j);
}

TEST(Fp8Join, PerTensorDifferentScalarsBecomePerChannel) {
  std::vector<Part> parts{part("q", 5, 8, Fp8ScaleMode::kPerTensor), part("k", 3, 8, Fp8ScaleMode::kPerTensor),
                          part("v", 2, 8, Fp8ScaleMode::kPerTensor)};
  parts[0].scales = {0.25f};
  parts[1].scales = {0.5f};
  parts[2].scales = {0.125f};
  const Fp8JoinedScales j = join(parts);
  ASSERT_TRUE(j.joined()) << j.why_not;
  EXPECT_EQ(j.mode, Fp8ScaleMode::kPerChannel);
  const std::vector<float> want{0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.5f, 0.5f, 0.5f, 0.125f, 0.125f};
  EXPECT_EQ(j.scales, want);
  expect_same_dequantization(parts, j);
}

TEST(Fp8Join, PerTensorEqualScalarsStayPerTensor) {
  std::vector<Part> parts{part("gate", 7, 8, Fp8ScaleMode::kPerTensor), part("up", 7, 8, Fp8ScaleMode::kPerTensor)};
  parts[0].scales = parts[1].scales = {0.03125f};
  const Fp8JoinedScales j = join(parts);
  ASSERT_TRUE(j.joined()) << j.why_not;
  EXPECT_EQ(j.mode, Fp8ScaleMode::kPerTensor);
  EXPECT_EQ(j.scales, std::vector<float>{0.03125f});
  EXPECT_EQ(j.rows, 14);
  expect_same_dequantization(parts, j);
}

TEST(Fp8Join, Block128ConcatenatesBlockRows) {
  // q 256 rows, k and v 128, 300 inputs (3 block columns, the last partial).
  const std::vector<Part> parts{part("q", 256, 300, Fp8ScaleMode::kBlock128),
                                part("k", 128, 300, Fp8ScaleMode::kBlock128),
                                part("v", 128, 300, Fp8ScaleMode::kBlock128)};
  const Fp8JoinedScales j = join(parts);
  EXPECT_EQ(j.mode, Fp8ScaleMode::kBlock128);
  EXPECT_EQ(j.scales.size(), 4u * 3u);
  expect_same_dequantization(parts, j);
}

TEST(Fp8Join, Block128LastPartMayEndInAPartialBlock) {
  const std::vector<Part> parts{part("gate", 128, 256, Fp8ScaleMode::kBlock128),
                                part("up", 200, 256, Fp8ScaleMode::kBlock128)};
  const Fp8JoinedScales j = join(parts);
  EXPECT_EQ(j.rows, 328);
  expect_same_dequantization(parts, j);
}

TEST(Fp8Join, Block128PartialBlockBeforeAnotherPartRefused) {
  const std::vector<Part> parts{part("q", 256, 128, Fp8ScaleMode::kBlock128),
                                part("k", 64, 128, Fp8ScaleMode::kBlock128),
                                part("v", 64, 128, Fp8ScaleMode::kBlock128)};
  const Fp8JoinedScales j = join(parts);
  EXPECT_FALSE(j.joined());
  EXPECT_THAT(j.why_not, HasSubstr("k has 64 rows, not a multiple of 128"));
  EXPECT_TRUE(j.scales.empty());
}

TEST(Fp8Join, MixedModesRefused) {
  const std::vector<Part> parts{part("gate", 128, 128, Fp8ScaleMode::kBlock128),
                                part("up", 128, 128, Fp8ScaleMode::kPerTensor)};
  const Fp8JoinedScales j = join(parts);
  EXPECT_FALSE(j.joined());
  EXPECT_THAT(j.why_not, HasSubstr("up has per-tensor scales, gate has block 128x128"));
  const std::vector<Part> channel_tensor{part("a", 4, 16, Fp8ScaleMode::kPerChannel),
                                         part("b", 4, 16, Fp8ScaleMode::kPerTensor)};
  EXPECT_FALSE(join(channel_tensor).joined());
}

TEST(Fp8Join, DifferentInputWidthsRefused) {
  const Fp8JoinedScales j =
      join({part("a", 4, 16, Fp8ScaleMode::kPerChannel), part("b", 4, 32, Fp8ScaleMode::kPerChannel)});
  EXPECT_FALSE(j.joined());
  EXPECT_THAT(j.why_not, HasSubstr("b has 32 inputs, a has 16"));
}

TEST(Fp8Join, StaticInputScales) {
  // Equal: joined, the scale kept.
  const std::vector<Part> same{part("q", 4, 16, Fp8ScaleMode::kPerTensor, 0.05f),
                               part("k", 4, 16, Fp8ScaleMode::kPerTensor, 0.05f)};
  const Fp8JoinedScales j = join(same);
  ASSERT_TRUE(j.joined()) << j.why_not;
  EXPECT_EQ(j.input_scale, std::optional<float>(0.05f));
  expect_same_dequantization(same, j);
  // Different: one activation quantization per joined product, so not joined.
  const Fp8JoinedScales differ = join({part("q", 4, 16, Fp8ScaleMode::kPerTensor, 0.05f),
                                       part("k", 4, 16, Fp8ScaleMode::kPerTensor, 0.07f)});
  EXPECT_FALSE(differ.joined());
  EXPECT_THAT(differ.why_not, HasSubstr("static input scales differ"));
  EXPECT_THAT(differ.why_not, HasSubstr("one activation quantization per joined product"));
  // One with, one without: not joined either.
  const Fp8JoinedScales partly = join({part("gate", 4, 16, Fp8ScaleMode::kPerChannel, 0.05f),
                                       part("up", 4, 16, Fp8ScaleMode::kPerChannel)});
  EXPECT_FALSE(partly.joined());
  EXPECT_THAT(partly.why_not, HasSubstr("up none"));
  // None: joined, none kept.
  const Fp8JoinedScales none =
      join({part("gate", 4, 16, Fp8ScaleMode::kPerChannel), part("up", 4, 16, Fp8ScaleMode::kPerChannel)});
  ASSERT_TRUE(none.joined());
  EXPECT_FALSE(none.input_scale.has_value());
}

TEST(Fp8Join, BadPartsThrowNamingThePart) {
  EXPECT_THROW(join_fp8_scales({}), Error);
  Part p = part("model.layers.0.mlp.up_proj.weight", 4, 16, Fp8ScaleMode::kPerChannel);
  p.scales.pop_back();
  try {
    join({part("gate", 4, 16, Fp8ScaleMode::kPerChannel), p});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.layers.0.mlp.up_proj.weight [4, 16] has 3 scales, 4 per-channel"));
  }
}

}  // namespace
}  // namespace spindle
