// The AMX instructions alone, each in a child process, against scalar products: on a CPU where the
// amx_int8 linear kernel dies with SIGILL (seen on an H200 host's Xeon, 2026-12-07, while the
// AMX-BF16 attention ran), these cases say whether the instruction itself faults there (a case
// "killed by signal 4") or the kernel does something the instruction refuses (every case passes).
// Shapes: full 16 x 64-byte tiles, and the very configurations quant_linear_amx.cc loads (M rows
// of A of kb = 32 or 16 bytes, B of kb / 4 rows of 64 bytes, C of M rows of 16 int32), after a
// tile release too. Skipped, with the reason, where the CPU or Linux does not offer AMX.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>

#include "platform/cpu_info.h"

namespace spindle::kernels::cpu {
namespace {

std::string skip_reason(std::string_view feature) {
  const CpuInfo cpu = detect_cpu_info();  // requests the AMX permission where AMX-TILE exists
  if (!cpu.has("amx_tile")) return "CPU or Linux offers no usable AMX-TILE";
  if (!cpu.has(feature)) return "CPU lacks " + std::string(feature);
  return "";
}

// C[m][n] += sum_k A[m][k] * B[k / 4][4 n + k % 4] (u8 x s8, tdpbusd's definition): rows x kb bytes
// of A, kb / 4 rows of 64 bytes of B. Returns 0 when the tile product equals the scalar one.
// The 64-byte palette-1 tile configuration, written from its definition (byte 0 palette, bytes
// 16 + 2t colsb of tile t, byte 48 + t its rows), independent of the kernels' AmxTileConfig.
struct alignas(64) TileConfig {
  uint8_t bytes[64] = {1};
  TileConfig& tile(int t, int rows, int colsb) {
    bytes[16 + 2 * t] = static_cast<uint8_t>(colsb);
    bytes[17 + 2 * t] = static_cast<uint8_t>(colsb >> 8);
    bytes[48 + t] = static_cast<uint8_t>(rows);
    return *this;
  }
};

// Only these two functions hold AMX and AVX-512 code (target attribute): the rest of this file runs
// in the test's parent on any x86-64, where it must be able to skip.
#define SPINDLE_AMX_TARGET __attribute__((target("avx512f,amx-tile,amx-int8,amx-bf16")))

SPINDLE_AMX_TARGET int tdpbusd_case(int rows, int kb, bool release_first) {
  std::mt19937 rng(static_cast<uint32_t>(rows * 100 + kb));
  alignas(64) uint8_t a[16 * 64];
  alignas(64) int8_t b[16 * 64];
  alignas(64) int32_t c[16 * 16];
  for (auto& v : a) v = static_cast<uint8_t>(rng());
  for (auto& v : b) v = static_cast<int8_t>(rng());
  TileConfig cfg;
  cfg.tile(0, rows, 64).tile(1, rows, 64).tile(2, rows, kb).tile(3, rows, kb).tile(4, kb / 4, 64).tile(5, kb / 4, 64);
  if (release_first) {
    _tile_loadconfig(&cfg);
    _tile_release();
  }
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_loadd(2, a, 64);
  _tile_loadd(4, b, 64);
  _tile_dpbusd(0, 2, 4);
  _tile_stored(0, c, 64);
  _tile_release();
  for (int m = 0; m < rows; ++m) {
    for (int n = 0; n < 16; ++n) {
      int32_t want = 0;
      for (int k = 0; k < kb; ++k) want += int32_t{a[m * 64 + k]} * int32_t{b[(k / 4) * 64 + 4 * n + k % 4]};
      if (c[m * 16 + n] != want) return 1;
    }
  }
  return 0;
}

// tdpbf16ps on full tiles: C[m][n] += sum_k A[m][k] * B[k / 2][2 n + k % 2] in f32 (bf16 inputs
// that are small integers, so every product and sum is exact).
SPINDLE_AMX_TARGET int tdpbf16ps_case() {
  std::mt19937 rng(7);
  alignas(64) uint16_t a[16 * 32];
  alignas(64) uint16_t b[16 * 32];
  alignas(64) float c[16 * 16];
  const auto bf16 = [](int v) {
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return static_cast<uint16_t>(bits >> 16);
  };
  int av[16 * 32], bv[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) a[i] = bf16(av[i] = static_cast<int>(rng() % 9) - 4);
  for (int i = 0; i < 16 * 32; ++i) b[i] = bf16(bv[i] = static_cast<int>(rng() % 9) - 4);
  TileConfig cfg;
  cfg.tile(0, 16, 64).tile(1, 16, 64).tile(2, 16, 64);
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_loadd(1, a, 64);
  _tile_loadd(2, b, 64);
  _tile_dpbf16ps(0, 1, 2);
  _tile_stored(0, c, 64);
  _tile_release();
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      int want = 0;
      for (int k = 0; k < 32; ++k) want += av[m * 32 + k] * bv[(k / 2) * 32 + 2 * n + k % 2];
      if (c[m * 16 + n] != static_cast<float>(want)) return 1;
    }
  }
  return 0;
}

TEST(AmxInstructionsDeathTest, TdpbusdOnFullTiles) {
  if (auto reason = skip_reason("amx_int8"); !reason.empty()) GTEST_SKIP() << reason;
  EXPECT_EXIT(std::exit(tdpbusd_case(16, 64, false)), ::testing::ExitedWithCode(0), "");
}

TEST(AmxInstructionsDeathTest, TdpbusdInQuantLinearAmxConfigurations) {
  if (auto reason = skip_reason("amx_int8"); !reason.empty()) GTEST_SKIP() << reason;
  for (int rows : {1, 3, 16}) {
    for (int kb : {16, 32}) {
      for (bool release_first : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " kb " << kb << " release first " << release_first);
        EXPECT_EXIT(std::exit(tdpbusd_case(rows, kb, release_first)), ::testing::ExitedWithCode(0), "");
      }
    }
  }
}

TEST(AmxInstructionsDeathTest, Tdpbf16psOnFullTiles) {
  if (auto reason = skip_reason("amx_bf16"); !reason.empty()) GTEST_SKIP() << reason;
  EXPECT_EXIT(std::exit(tdpbf16ps_case()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace spindle::kernels::cpu
