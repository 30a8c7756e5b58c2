// The AMX tile configuration (palette 1: the 64-byte block _tile_loadconfig reads) shared by the
// AMX kernels (linear_amx.cc, quant_linear_amx.cc, paged_attention_amx.cc). Included only by files
// compiled with -mamx-tile; everything is in an anonymous namespace so the inclusions never share
// code compiled with different flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace spindle::kernels::cpu {
namespace {

// Tile t holds rows[t] rows of colsb[t] bytes (at most 16 x 64); a tile left at 0 is unused.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};

  AmxTileConfig& tile(int t, int num_rows, int bytes_per_row) {
    rows[t] = static_cast<uint8_t>(num_rows);
    colsb[t] = static_cast<uint16_t>(bytes_per_row);
    return *this;
  }
  void load() const { _tile_loadconfig(this); }
};
static_assert(sizeof(AmxTileConfig) == 64, "the AMX palette-1 configuration is 64 bytes");

// Tiles [0, count) at their full size, 16 rows of 64 bytes.
inline void load_full_amx_tiles(int count) {
  AmxTileConfig cfg;
  for (int t = 0; t < count; ++t) cfg.tile(t, 16, 64);
  cfg.load();
}

}  // namespace
}  // namespace spindle::kernels::cpu
