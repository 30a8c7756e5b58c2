// libFuzzer target: parse_safetensors_header on arbitrary bytes.
// Contract under test: it either throws spindle::Error or returns tensors whose byte ranges lie
// inside the data area, match shape * dtype size, are sorted by name and do not overlap.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "model/safetensors.h"
#include "util/error.h"

namespace {

void check_invariants(const std::vector<spindle::TensorInfo>& tensors, size_t file_size) {
  uint64_t covered = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (t.begin > t.end || t.end > file_size) std::abort();
    if (t.num_elements() * spindle::dtype_size(t.dtype) != t.num_bytes()) std::abort();
    if (i > 0 && !(tensors[i - 1].name < t.name)) std::abort();
    covered += t.num_bytes();
  }
  if (covered > file_size) std::abort();  // only possible if ranges overlap
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    std::map<std::string, std::string> metadata;
    check_invariants(spindle::parse_safetensors_header(bytes, "fuzz.safetensors", &metadata), size);
  } catch (const spindle::Error&) {
    // Rejected input: the expected outcome for most mutations.
  }
  return 0;
}
