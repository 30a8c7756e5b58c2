// The one type of a vocabulary token id, in every layer (tokenizer, server, engine, model,
// kernels). Plain C++17 (CUDA files include it).
#pragma once

#include <cstdint>

namespace spindle {

using TokenId = int32_t;

}  // namespace spindle
