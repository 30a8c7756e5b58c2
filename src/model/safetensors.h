// Safetensors checkpoints: one file, or a folder of shards with model.safetensors.index.json.
//
// File layout: [u64 little-endian N][N bytes of JSON header][data area]. The header maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the
// start of the data area, plus an optional "__metadata__" object of strings.
// Everything is validated on open; tensor bytes are then served zero-copy from the mmap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/dtype.h"
#include "util/mapped_file.h"

namespace spindle {

// Largest header accepted (the limit of the reference safetensors implementation).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major, outermost first; [] is a scalar
  uint64_t begin = 0;          // byte offsets within the data area; end - begin = bytes
  uint64_t end = 0;
  int shard = 0;  // index into Checkpoint::shard(); 0 for a lone file

  uint64_t num_elements() const;
  uint64_t num_bytes() const { return end - begin; }
};

// A tensor's header entry and its bytes inside a mapped file (valid while the file lives).
struct TensorView {
  const TensorInfo* info = nullptr;
  std::span<const std::byte> bytes;
};

// Parses and validates the header of a whole safetensors file held in memory. Returns the
// tensors sorted by name, each with shard 0. Throws spindle::Error naming file_name (and the
// tensor, where one is at fault) when: the file is shorter than 8 bytes; the header length runs
// past the end of the file or exceeds kMaxSafetensorsHeaderBytes; the header is not a JSON
// object; a name appears twice; __metadata__ is not an object of strings; an entry lacks
// dtype/shape/data_offsets or has the wrong types; the dtype is not one of F32, F16, BF16, I8,
// U8, F8_E4M3; a dimension is negative; data_offsets is not [begin, end] with begin <= end <=
// data area size; the element count times the dtype size differs from end - begin; or two
// non-empty tensors overlap. Gaps between tensors and bytes after the last one are tolerated.
// Pure: no I/O. When metadata is given it receives __metadata__.
std::vector<TensorInfo> parse_safetensors_header(std::span<const std::byte> file_bytes,
                                                 std::string_view file_name,
                                                 std::map<std::string, std::string>* metadata =
                                                     nullptr);

// One mapped, validated .safetensors file.
class SafetensorsFile {
 public:
  // shard is stored in every TensorInfo. Throws as parse_safetensors_header, or when the file
  // cannot be opened.
  explicit SafetensorsFile(const std::filesystem::path& path, int shard = 0,
                           FileMemory memory = FileMemory::kMapped);

  const std::filesystem::path& path() const { return file_.path(); }
  // Sorted by name.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  // Throws naming the file and the tensor when absent.
  TensorView tensor(std::string_view name) const;
  // The bytes of a tensor of this file.
  std::span<const std::byte> bytes(const TensorInfo& info) const;

 private:
  MappedFile file_;
  uint64_t data_offset_ = 0;  // 8 + header length
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model folder: model.safetensors.index.json (weight_map: tensor -> shard file)
// when present, else a lone model.safetensors. Tensor names are unique across shards and every
// tensor the index names is in the shard it names (errors name the tensor and the files).
class Checkpoint {
 public:
  // memory: where every shard's bytes live (util/mapped_file.h).
  explicit Checkpoint(const std::filesystem::path& model_dir, FileMemory memory = FileMemory::kMapped);

  const std::filesystem::path& dir() const { return dir_; }
  // Every tensor of every shard, sorted by name.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  int num_shards() const { return static_cast<int>(shards_.size()); }
  const SafetensorsFile& shard(int index) const { return *shards_.at(static_cast<size_t>(index)); }
  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  // Throws naming the folder and the tensor when absent.
  TensorView tensor(std::string_view name) const;
  // Sum of all tensors' bytes.
  uint64_t total_bytes() const;

 private:
  void open_single(const std::filesystem::path& file);
  void open_sharded(const std::filesystem::path& index_file);
  void index_tensors();

  std::filesystem::path dir_;
  FileMemory memory_ = FileMemory::kMapped;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;  // keys view tensors_[i].name
};

}  // namespace spindle
