// libFuzzer target: gguf::parse_header on arbitrary bytes, then every metadata value through the
// typed getters, then the hyper-parameter tables (read_hyper_params).
// Contract under test: parse_header either throws spindle::Error or returns a header whose tensors
// lie inside the file, after the header, aligned, without overlap, with sizes that match their
// shape and type; the getters and read_hyper_params either return or throw spindle::Error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "gguf/gguf_file.h"
#include "gguf/gguf_hparams.h"
#include "util/error.h"

namespace {

using spindle::gguf::Header;
using spindle::gguf::TensorInfo;

void check_invariants(const Header& header, size_t file_size) {
  if (header.version != 2 && header.version != 3) std::abort();
  if (header.alignment == 0 || (header.alignment & (header.alignment - 1)) != 0) std::abort();
  if (header.data_offset % header.alignment != 0) std::abort();
  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : header.tensors) {
    if (t.offset < header.data_offset || t.offset > file_size || t.size > file_size - t.offset) {
      std::abort();
    }
    if ((t.offset - header.data_offset) % header.alignment != 0) std::abort();
    const uint64_t block = spindle::gguf::ggml_block_elements(t.type);
    if (t.ne[0] % block != 0) std::abort();
    if (t.size != t.ne[0] / block * spindle::gguf::ggml_block_bytes(t.type) * t.num_rows()) {
      std::abort();
    }
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i]->offset < order[i - 1]->offset + order[i - 1]->size) std::abort();
  }
}

template <typename F>
void tolerate(F&& f) {
  try {
    f();
  } catch (const spindle::Error&) {
  }
}

void read_every_value(const spindle::gguf::Metadata& metadata) {
  for (size_t i = 0; i < metadata.size(); ++i) {
    const std::string& key = metadata.entry(i).first;
    if (metadata.find(key) != &metadata.entry(i).second) std::abort();
    tolerate([&] { metadata.find_int(key); });
    tolerate([&] { metadata.find_float(key); });
    tolerate([&] { metadata.find_bool(key); });
    tolerate([&] { metadata.find_string(key); });
    tolerate([&] { metadata.find_string_array(key); });
    tolerate([&] { metadata.find_int_array(key); });
    tolerate([&] { metadata.find_float_array(key); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const Header header = spindle::gguf::parse_header(bytes, "fuzz.gguf");
    check_invariants(header, size);
    read_every_value(header.metadata);
    tolerate([&] { spindle::gguf::read_hyper_params(header, bytes); });
  } catch (const spindle::Error&) {
    // Rejected input: the expected outcome for most mutations.
  }
  return 0;
}
