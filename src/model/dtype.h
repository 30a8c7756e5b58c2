// DType moved to util/dtype.h (the KV cache and kernels, lower layers, use it too).
#pragma once
#include "util/dtype.h"
