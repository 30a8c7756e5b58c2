// The GGUF container: header, metadata, tensor infos and the tensors' bytes, read in place from
// the mapped (or huge-page copied) file.
//
// Layout (GGUF v2 and v3; v1's 32-bit counts are refused), all little-endian:
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x   { string key | u32 value type | value }    (an array: u32 element type, u64 n, n values)
//   n_tensors x { string name | u32 n_dims | n_dims x u64 ne | u32 ggml type | u64 offset }
//   padding to the alignment | data area (tensor offsets are relative to it)
// A string is u64 length then that many bytes (no terminator). The alignment is metadata
// "general.alignment" (uint32, a power of two), else 32; every tensor offset is a multiple of
// it, and the data area starts at the first multiple of it after the tensor infos.
//
// Shapes are ggml's: ne[0] is the innermost (contiguous) dimension, so a PyTorch [rows, cols]
// weight has ne = {cols, rows}. ne[0] is a multiple of the type's block size, and a row is
// ne[0] / block_elements * block_bytes bytes.
//
// Every malformed file is a spindle::Error naming the file, the key or tensor where known, and
// what was wrong (truncated, bad magic, unsupported version, absurd counts, lengths or sizes past
// the end, unknown value or tensor type, bad dimensions, misaligned or out-of-range or
// overlapping tensor data, duplicate keys or tensor names).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/ggml_type.h"
#include "gguf/gguf_metadata.h"
#include "util/mapped_file.h"

namespace spindle::gguf {

inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;
inline constexpr size_t kMaxTensorName = 63;  // ggml's limit (64 with the terminator)

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  int n_dims = 0;
  std::array<uint64_t, kMaxDims> ne{1, 1, 1, 1};  // ne[0] innermost; unused dims are 1
  uint64_t offset = 0;  // from the start of its file (the header's relative offset resolved)
  uint64_t size = 0;    // bytes
  int split = 0;        // which file of a split model holds it (0 for a single file)

  uint64_t num_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  uint64_t num_rows() const { return ne[1] * ne[2] * ne[3]; }
  uint64_t row_bytes() const { return size / num_rows(); }
};

// One file's parsed header (no ownership of the bytes: values and data refer into them).
struct Header {
  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  Metadata metadata;
  std::vector<TensorInfo> tensors;  // file order
  uint64_t data_offset = 0;         // start of the data area
};

// Parses and validates a whole GGUF file held in `bytes`; `source_name` names it in every error.
// The returned metadata refers into `bytes`.
Header parse_header(std::span<const std::byte> bytes, std::string_view source_name);

// A GGUF model: one file, or the N files of a split model ("<prefix>-00001-of-0000N.gguf", each
// with split.no / split.count / split.tensors.count) opened from the first. Metadata is the first
// file's; tensors are all files' tensors, each with its split index.
class GgufFile {
 public:
  // Throws spindle::Error naming the file (and for splits, which part) when anything is wrong.
  explicit GgufFile(const std::filesystem::path& path, FileMemory memory = FileMemory::kMapped);
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return headers_.front().version; }
  const Metadata& metadata() const { return headers_.front().metadata; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  size_t num_splits() const { return files_.size(); }
  const std::filesystem::path& split_path(size_t i) const { return files_[i]->path(); }

  // nullptr when absent.
  const TensorInfo* find_tensor(std::string_view name) const;
  // Throws naming the file and the tensor when absent.
  const TensorInfo& tensor(std::string_view name) const;
  // The tensor's bytes, in place in its file's memory.
  std::span<const std::byte> tensor_data(const TensorInfo& info) const;

 private:
  void open_splits(FileMemory memory);

  std::filesystem::path path_;
  std::vector<std::unique_ptr<MappedFile>> files_;  // stable addresses: headers refer into them
  std::vector<Header> headers_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// The path of part `index` (0-based) of `count` next to `first`, whose name must end in
// "-00001-of-<count, 5 digits>.gguf"; throws naming the file otherwise.
std::filesystem::path split_part_path(const std::filesystem::path& first, int index, int count);

}  // namespace spindle::gguf
