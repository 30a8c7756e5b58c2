// The scales of an fp8_e4m3 KV cache (kernels/kv_scales.h), decided once at start, before the
// pool's first page is written:
//   1. the checkpoint's k_scale / v_scale tensors (model/kv_scale_tensors.h), where it has them;
//   2. else, with --kv-cache-scales auto, calibrate_kv_scales on kCalibrationText;
//   3. else 1.0 for every layer and head (the scale vLLM uses without checkpoint scales).
#pragma once

#include <filesystem>
#include <span>

#include "kernels/kv_scales.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace spindle {
class ThreadPool;
}

namespace spindle::startup {

// The calibration prompt of --kv-cache-scales auto: plain English prose, a few dozen tokens.
extern const char* const kCalibrationText;

// Runs `prompt` through `model` as one prefill into a scratch f32 KV pool of the model's device,
// with that device's reference attention backend ("reference" or "cuda_reference"), and returns
// for each layer and KV head max|K| / 448 and max|V| / 448 over the prompt's positions (448: the
// largest finite E4M3FN value; a head whose absmax is 0 or not finite gets 1.0). Source
// "calibrated (absmax / 448)". Throws for an empty prompt.
KvScales calibrate_kv_scales(Transformer& model, std::span<const TokenId> prompt, int page_size, ThreadPool* pool);

// The order above. model_dir: the checkpoint folder (a GGUF file has no KV scales: steps 2-3).
KvScales choose_kv_scales(const std::filesystem::path& model_dir, bool calibrate, Transformer& model,
                          const tokenizer::Tokenizer& tokenizer, int page_size, ThreadPool* pool);

}  // namespace spindle::startup
