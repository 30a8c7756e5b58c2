// Helpers of the on-disk caches (attn/select/validation_cache, kernels/cpu/select's linear kernel
// cache, kernels/fp8_prefill_cache, startup/workspace_cache): a stable hash of a cache key for the
// file name, a whole-file write that readers never see half done, and the selection caches' file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace spindle {

// 64-bit FNV-1a of `text` (stable across builds and machines: it names cache files).
uint64_t fnv1a_64(std::string_view text);

// Writes `text` to `path` through a temporary file in the same folder renamed over it (creating
// the folder). Throws std::exception (filesystem_error or runtime_error) when it cannot.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

// A selection cache's file (attention backends, linear kernels, FP8 prefill kernels): one cache key
// and the outcome of each backend or kernel checked under it,
//   {"key": "<key>", "outcomes": {"<name>": <outcome>, ...}}
// read_keyed_outcomes calls add(name, outcome) for each outcome of the file at `path`, in name
// order, and returns true (true without a call when there is no file). It returns false after a
// warning naming `what` ("linear kernel cache") and the path when the file holds another key or is
// corrupt (not JSON, "key" or "outcomes" missing or mistyped, or `add` threw): the caller then drops
// whatever `add` received.
bool read_keyed_outcomes(const std::filesystem::path& path, std::string_view key, std::string_view what,
                         const std::function<void(const std::string& name, const nlohmann::json& outcome)>& add);
// Writes {"key": key, "outcomes": outcomes} (indented by 2, a final newline) with
// write_file_atomically; a failure is a warning naming `what` and the path, never an exception.
void write_keyed_outcomes(const std::filesystem::path& path, std::string_view key, const nlohmann::json& outcomes,
                          std::string_view what);

}  // namespace spindle
