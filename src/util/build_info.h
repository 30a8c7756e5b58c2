#pragma once

#include <string_view>

namespace spindle {

// Identifies this build (version, git commit, compiler); part of every on-disk cache key.
std::string_view build_id();
// True when the CUDA parts were compiled in.
bool built_with_cuda();

}  // namespace spindle
