// Helpers of the on-disk caches (attn/select/validation_cache, startup/workspace_cache): a
// stable hash of a cache key for the file name, and a whole-file write that readers never see
// half done.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

namespace spindle {

// 64-bit FNV-1a of `text` (stable across builds and machines: it names cache files).
uint64_t fnv1a_64(std::string_view text);

// Writes `text` to `path` through a temporary file in the same folder renamed over it (creating
// the folder). Throws std::exception (filesystem_error or runtime_error) when it cannot.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace spindle
