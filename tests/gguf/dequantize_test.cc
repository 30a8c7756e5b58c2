// dequantize_row against (1) the float64 references of ggml_reference.h on random blocks and
// (2) the llama.cpp snapshot's own ggml dequantize_row_* outputs (tests/golden/gguf/
// ggml_dequant.bin, made by make_ggml_dequant.c there).
// Tolerance: none. Each element is an exact float64 value (fp16 scales times small integers)
// that f32 arithmetic rounds once, so the f32 result must equal the reference rounded to f32.
#include "gguf/dequantize.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "ggml_reference.h"
#include "util/error.h"

namespace spindle::gguf {
namespace {

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                           GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// Byte offsets of a block's fp16 fields (kept finite), and whether the whole block is one float.
std::vector<int> half_fields(GgmlType type) {
  switch (type) {
    case GgmlType::kF16: case GgmlType::kQ8_0: case GgmlType::kQ4_0: case GgmlType::kQ5_0:
      return {0};
    case GgmlType::kQ4_1: case GgmlType::kQ5_1: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
      return {0, 2};
    case GgmlType::kQ6_K: return {208};
    default: return {};
  }
}

// Random blocks: uniform bytes, fp16 fields finite (subnormals included), f32/bf16 finite.
std::vector<uint8_t> random_blocks(GgmlType type, size_t blocks, std::mt19937& rng) {
  const size_t size = ggml_block_bytes(type);
  std::vector<uint8_t> data(blocks * size);
  for (auto& byte : data) byte = static_cast<uint8_t>(rng());
  for (size_t b = 0; b < blocks; ++b) {
    uint8_t* block = data.data() + b * size;
    for (int offset : half_fields(type)) {
      while (((block[offset + 1] >> 2) & 31) == 31) block[offset + 1] = static_cast<uint8_t>(rng());
    }
    if (type == GgmlType::kF32) {
      while (((block[3] & 0x7f) << 1 | block[2] >> 7) == 255) block[3] = static_cast<uint8_t>(rng());
    }
    if (type == GgmlType::kBF16) {
      while (((block[1] & 0x7f) << 1 | block[0] >> 7) == 255) block[1] = static_cast<uint8_t>(rng());
    }
  }
  return data;
}

std::span<const std::byte> bytes_of(const std::vector<uint8_t>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size()};
}

TEST(Dequantize, RandomBlocksEqualTheFloat64Reference) {
  std::mt19937 rng(1234);
  for (const GgmlType type : kTypes) {
    SCOPED_TRACE(std::string(ggml_type_name(type)));
    const size_t per_block = ggml_block_elements(type);
    const size_t blocks = per_block == 1 ? 4096 : 400;
    const auto data = random_blocks(type, blocks, rng);
    std::vector<float> out(blocks * per_block);
    dequantize_row(type, bytes_of(data), out);
    size_t mismatches = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const uint8_t* block = data.data() + (i / per_block) * ggml_block_bytes(type);
      const double ref = reference::element(type, block, static_cast<int>(i % per_block));
      if (out[i] != static_cast<float>(ref) && mismatches++ < 5) {
        ADD_FAILURE() << "element " << i << ": " << out[i] << " vs reference " << ref;
      }
    }
    EXPECT_EQ(mismatches, 0u);
  }
}

TEST(Dequantize, EqualsGgmlOnItsOwnOutputs) {
  std::ifstream in(std::string(SPINDLE_SOURCE_DIR) + "/tests/golden/gguf/ggml_dequant.bin",
                   std::ios::binary);
  ASSERT_TRUE(in);
  int types = 0;
  uint32_t head[4];
  while (in.read(reinterpret_cast<char*>(head), sizeof(head))) {
    const auto type = ggml_type_from_id(head[0]);
    ASSERT_TRUE(type.has_value()) << head[0];
    SCOPED_TRACE(std::string(ggml_type_name(*type)));
    ASSERT_EQ(head[2], ggml_block_elements(*type));
    ASSERT_EQ(head[3], ggml_block_bytes(*type));
    std::vector<uint8_t> data(size_t{head[1]} * head[3]);
    std::vector<float> expected(size_t{head[1]} * head[2]);
    in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size()));
    in.read(reinterpret_cast<char*>(expected.data()),
            static_cast<std::streamsize>(expected.size() * sizeof(float)));
    ASSERT_TRUE(in);
    std::vector<float> out(expected.size());
    dequantize_row(*type, bytes_of(data), out);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i], expected[i]) << "element " << i;
      const double ref = reference::element(*type, data.data() + (i / head[2]) * head[3],
                                            static_cast<int>(i % head[2]));
      ASSERT_EQ(static_cast<float>(ref), expected[i]) << "reference, element " << i;
    }
    ++types;
  }
  EXPECT_EQ(types, 8);  // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
}

// Hand-made blocks whose values follow from the definitions by inspection.
TEST(Dequantize, KnownBlocks) {
  // Q4_0, d = 1.0 (0x3c00): byte j holds j (low) and 15 - j (high): x[j] = j - 8,
  // x[16 + j] = 7 - j.
  std::vector<uint8_t> q4(18);
  q4[0] = 0x00, q4[1] = 0x3c;
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  std::vector<float> out(32);
  dequantize_row(GgmlType::kQ4_0, bytes_of(q4), out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], j - 8);
    EXPECT_EQ(out[16 + j], 7 - j);
  }
  // Q6_K, d = 0.5 (0x3800), all scales 2, quants 32 (value 0) except: element 37 (half 0,
  // quarter 1, l = 5) gets low bits 15 in ql[5 + 32] and high bits 3 in qh[5] bits 2-3:
  // q = 63 - 32 = 31 -> 0.5 * 2 * 31 = 31; element 200 (half 1, quarter 2, l = 8) gets
  // ql[64 + 8] high nibble 0 and qh[32 + 8] bits 4-5 = 0: q = -32, scale[8 + 4 + 0] = -3 -> 48.
  std::vector<uint8_t> q6(210, 0);
  for (int l = 0; l < 64; ++l) q6[128 + l] = 0xaa;  // high bits 2 everywhere: q = 32 - 32 = 0
  for (int s = 0; s < 16; ++s) q6[192 + s] = 2;
  q6[208] = 0x00, q6[209] = 0x38;
  q6[5 + 32] = 0x0f;
  q6[128 + 5] = static_cast<uint8_t>((0xaa & ~0x0c) | 0x0c);
  q6[128 + 32 + 8] = static_cast<uint8_t>(0xaa & ~0x30);
  q6[192 + 12] = static_cast<uint8_t>(-3);
  out.assign(256, -1);
  dequantize_row(GgmlType::kQ6_K, bytes_of(q6), out);
  for (int e = 0; e < 256; ++e) {
    const float expected = e == 37 ? 31.0f : e == 200 ? 48.0f : 0.0f;
    EXPECT_EQ(out[e], expected) << e;
  }
}

TEST(Dequantize, TensorRowAndErrors) {
  std::mt19937 rng(7);
  TensorInfo info;
  info.name = "token_embd.weight";
  info.type = GgmlType::kQ5_K;
  info.n_dims = 2;
  info.ne = {512, 3, 1, 1};
  info.size = 3 * 2 * 176;
  const auto data = random_blocks(GgmlType::kQ5_K, 6, rng);
  std::vector<float> row(512);
  dequantize_tensor_row(info, bytes_of(data), 2, row);
  for (int e = 0; e < 512; ++e) {
    const double ref = reference::element(GgmlType::kQ5_K, data.data() + (4 + e / 256) * 176, e % 256);
    ASSERT_EQ(row[e], static_cast<float>(ref)) << e;
  }
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { dequantize_tensor_row(info, bytes_of(data), 3, row); })
                .find("tensor 'token_embd.weight': row 3 of 3"), std::string::npos);
  info.type = GgmlType::kQ2_K;
  EXPECT_NE(message([&] { dequantize_tensor_row(info, bytes_of(data), 0, row); })
                .find("tensor 'token_embd.weight': ggml type Q2_K cannot be dequantized"),
            std::string::npos);
  EXPECT_NE(message([&] { dequantize_row(GgmlType::kIQ4_XS, {}, {}); })
                .find("ggml type IQ4_XS is not supported"), std::string::npos);
  std::vector<float> odd(48);
  EXPECT_NE(message([&] { dequantize_row(GgmlType::kQ8_0, bytes_of(data), odd); })
                .find("48 elements of Q8_0"), std::string::npos);
}

}  // namespace
}  // namespace spindle::gguf
