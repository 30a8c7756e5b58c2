// GgufFile: opening one GGUF file, or every part of a split model from its first part.
#include <fmt/format.h>

#include "gguf/gguf_file.h"
#include "util/error.h"

namespace spindle::gguf {
namespace {

constexpr int kMaxSplits = 99999;  // five digits in the part names

struct SplitKeys {
  int no = 0;
  int count = 1;
  int64_t tensors = -1;  // split.tensors.count, -1 when absent
};

SplitKeys read_split_keys(const Metadata& metadata) {
  SplitKeys keys;
  const auto count = metadata.find_int("split.count");
  if (!count) return keys;
  SPINDLE_CHECK(*count >= 1 && *count <= kMaxSplits,
                "{}: metadata key 'split.count' is {} (must be 1 to {})", metadata.source_name(),
                *count, kMaxSplits);
  keys.count = static_cast<int>(*count);
  const int64_t no = metadata.get_int("split.no");
  SPINDLE_CHECK(no >= 0 && no < *count, "{}: metadata key 'split.no' is {} (split.count is {})",
                metadata.source_name(), no, *count);
  keys.no = static_cast<int>(no);
  keys.tensors = metadata.find_int("split.tensors.count").value_or(-1);
  return keys;
}

}  // namespace

std::filesystem::path split_part_path(const std::filesystem::path& first, int index, int count) {
  const std::string name = first.filename().string();
  const std::string first_suffix = fmt::format("-00001-of-{:05d}.gguf", count);
  SPINDLE_CHECK(name.size() > first_suffix.size() &&
                    name.compare(name.size() - first_suffix.size(), first_suffix.size(),
                                 first_suffix) == 0,
                "{}: the first part of a {}-part split model must be named "
                "'<name>{}'", first.string(), count, first_suffix);
  const std::string prefix = name.substr(0, name.size() - first_suffix.size());
  return first.parent_path() / fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, index + 1, count);
}

GgufFile::GgufFile(const std::filesystem::path& path, FileMemory memory) : path_(path) {
  files_.push_back(std::make_unique<MappedFile>(path, memory));
  headers_.push_back(parse_header(files_.front()->bytes(), path.string()));
  open_splits(memory);
  for (size_t split = 0; split < headers_.size(); ++split) {
    for (TensorInfo& t : headers_[split].tensors) {
      t.split = static_cast<int>(split);
      const auto [it, inserted] = tensor_index_.emplace(t.name, tensors_.size());
      SPINDLE_CHECK(inserted, "{}: tensor '{}' appears in part {} and again in part {}",
                    path.string(), t.name, tensors_[it->second].split + 1, split + 1);
      tensors_.push_back(t);
    }
  }
  const SplitKeys keys = read_split_keys(metadata());
  SPINDLE_CHECK(keys.tensors < 0 || keys.tensors == static_cast<int64_t>(tensors_.size()),
                "{}: metadata key 'split.tensors.count' is {}, but the {} parts hold {} tensors",
                path.string(), keys.tensors, headers_.size(), tensors_.size());
}

void GgufFile::open_splits(FileMemory memory) {
  const SplitKeys first = read_split_keys(metadata());
  SPINDLE_CHECK(first.no == 0,
                "{}: this is part {} of a {}-part split model; open the first part "
                "('...-00001-of-{:05d}.gguf')", path_.string(), first.no + 1, first.count,
                first.count);
  for (int i = 1; i < first.count; ++i) {
    const std::filesystem::path part = split_part_path(path_, i, first.count);
    SPINDLE_CHECK(std::filesystem::exists(part),
                  "{}: part {} of the {}-part split model is missing: {}", path_.string(), i + 1,
                  first.count, part.string());
    files_.push_back(std::make_unique<MappedFile>(part, memory));
    headers_.push_back(parse_header(files_.back()->bytes(), part.string()));
    const SplitKeys keys = read_split_keys(headers_.back().metadata);
    SPINDLE_CHECK(keys.count == first.count && keys.no == i,
                  "{}: metadata says part {} of {} (split.no {}, split.count {}), expected part {} "
                  "of {}", part.string(), keys.no + 1, keys.count, keys.no, keys.count, i + 1,
                  first.count);
  }
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& GgufFile::tensor(std::string_view name) const {
  const TensorInfo* info = find_tensor(name);
  SPINDLE_CHECK(info != nullptr, "{}: missing tensor '{}'", path_.string(), name);
  return *info;
}

std::span<const std::byte> GgufFile::tensor_data(const TensorInfo& info) const {
  SPINDLE_CHECK(info.split >= 0 && static_cast<size_t>(info.split) < files_.size(),
                "{}: tensor '{}' names part {} of {}", path_.string(), info.name, info.split + 1,
                files_.size());
  return files_[info.split]->bytes().subspan(info.offset, info.size);
}

}  // namespace spindle::gguf
