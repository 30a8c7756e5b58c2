#include "model/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "util/error.h"

namespace spindle {
namespace {

using nlohmann::json;

constexpr size_t kHeaderLengthBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kIndexFile = "model.safetensors.index.json";
constexpr std::string_view kSingleFile = "model.safetensors";

std::string describe(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMaxChars = 80;
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

uint64_t read_u64_le(std::span<const std::byte> bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) {
    value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  }
  return value;
}

// A non-negative json integer, or nullopt.
std::optional<uint64_t> as_u64(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return std::nullopt;
}

// Parses the header JSON; a tensor name given twice is an error (nlohmann would keep the last).
json parse_header_json(std::string_view text, std::string_view file_name) {
  std::set<std::string> seen;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      auto name = parsed.get<std::string>();
      SPINDLE_CHECK(seen.insert(name).second, "{}: tensor '{}' appears twice in the header",
                    file_name, name);
    }
    return true;
  };
  json header = json::parse(text.begin(), text.end(), on_event, /*allow_exceptions=*/false);
  SPINDLE_CHECK(!header.is_discarded(), "{}: the safetensors header is not valid JSON",
                file_name);
  SPINDLE_CHECK(header.is_object(), "{}: the safetensors header must be a JSON object, got {}",
                file_name, describe(header));
  return header;
}

void read_metadata(const json& value, std::string_view file_name,
                   std::map<std::string, std::string>* metadata) {
  SPINDLE_CHECK(value.is_object(), "{}: __metadata__ must be an object of strings, got {}",
                file_name, describe(value));
  for (const auto& [key, item] : value.items()) {
    SPINDLE_CHECK(item.is_string(), "{}: __metadata__ entry '{}' must be a string, got {}",
                  file_name, key, describe(item));
    if (metadata != nullptr) (*metadata)[key] = item.get<std::string>();
  }
}

// One header entry, validated against the data area size.
TensorInfo read_tensor(const std::string& name, const json& entry, uint64_t data_size,
                       std::string_view file_name) {
  SPINDLE_CHECK(entry.is_object(), "{}: tensor '{}': entry must be an object, got {}", file_name,
                name, describe(entry));
  TensorInfo info;
  info.name = name;

  const auto dtype_it = entry.find("dtype");
  SPINDLE_CHECK(dtype_it != entry.end() && dtype_it->is_string(),
                "{}: tensor '{}': 'dtype' must be a string", file_name, name);
  const auto& dtype_name = dtype_it->get_ref<const std::string&>();
  const auto dtype = parse_safetensors_dtype(dtype_name);
  SPINDLE_CHECK(dtype.has_value(),
                "{}: tensor '{}' has dtype '{}', which is not supported (supported: F32, F16, "
                "BF16, I8, U8, F8_E4M3)",
                file_name, name, dtype_name);
  info.dtype = *dtype;

  const auto shape_it = entry.find("shape");
  SPINDLE_CHECK(shape_it != entry.end() && shape_it->is_array(),
                "{}: tensor '{}': 'shape' must be an array of non-negative integers", file_name,
                name);
  uint64_t num_elements = 1;
  bool overflow = false;
  for (const auto& dim_json : *shape_it) {
    const auto dim = as_u64(dim_json);
    SPINDLE_CHECK(dim.has_value() && *dim <= static_cast<uint64_t>(INT64_MAX),
                  "{}: tensor '{}': 'shape' must be an array of non-negative integers, got {}",
                  file_name, name, describe(*shape_it));
    info.shape.push_back(static_cast<int64_t>(*dim));
    overflow = overflow || __builtin_mul_overflow(num_elements, *dim, &num_elements);
  }
  uint64_t num_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(num_elements, dtype_size(info.dtype), &num_bytes);

  const auto offsets_it = entry.find("data_offsets");
  const bool offsets_ok = offsets_it != entry.end() && offsets_it->is_array() &&
                          offsets_it->size() == 2 && as_u64((*offsets_it)[0]).has_value() &&
                          as_u64((*offsets_it)[1]).has_value();
  SPINDLE_CHECK(offsets_ok,
                "{}: tensor '{}': 'data_offsets' must be [begin, end] with non-negative "
                "integers, got {}",
                file_name, name,
                offsets_it == entry.end() ? std::string("nothing") : describe(*offsets_it));
  info.begin = *as_u64((*offsets_it)[0]);
  info.end = *as_u64((*offsets_it)[1]);
  SPINDLE_CHECK(info.begin <= info.end, "{}: tensor '{}': data_offsets [{}, {}] has begin > end",
                file_name, name, info.begin, info.end);
  SPINDLE_CHECK(info.end <= data_size,
                "{}: tensor '{}': data_offsets [{}, {}] lie outside the data area ({} bytes); "
                "the file may be truncated",
                file_name, name, info.begin, info.end, data_size);
  SPINDLE_CHECK(!overflow && num_bytes == info.end - info.begin,
                "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] span {}",
                file_name, name, describe(*shape_it), dtype_name,
                overflow ? std::string("more than 2^64") : std::to_string(num_bytes), info.begin,
                info.end, info.end - info.begin);
  return info;
}

// Non-empty tensors must not share bytes.
void check_no_overlap(const std::vector<TensorInfo>& tensors, std::string_view file_name) {
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors) {
    if (t.num_bytes() > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& cur = *by_offset[i];
    SPINDLE_CHECK(cur.begin >= prev.end,
                  "{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap in the data area",
                  file_name, prev.name, prev.begin, prev.end, cur.name, cur.begin, cur.end);
  }
}

}  // namespace

uint64_t TensorInfo::num_elements() const {
  uint64_t n = 1;
  for (const int64_t dim : shape) n *= static_cast<uint64_t>(dim);
  return n;
}

std::vector<TensorInfo> parse_safetensors_header(std::span<const std::byte> file_bytes,
                                                 std::string_view file_name,
                                                 std::map<std::string, std::string>* metadata) {
  SPINDLE_CHECK(file_bytes.size() >= kHeaderLengthBytes,
                "{}: file is {} bytes, shorter than the 8-byte safetensors header length; it is "
                "truncated or not a safetensors file",
                file_name, file_bytes.size());
  const uint64_t header_size = read_u64_le(file_bytes);
  const uint64_t available = file_bytes.size() - kHeaderLengthBytes;
  SPINDLE_CHECK(header_size <= kMaxSafetensorsHeaderBytes,
                "{}: header length {} exceeds the {} byte limit; the file is corrupt or not a "
                "safetensors file",
                file_name, header_size, kMaxSafetensorsHeaderBytes);
  SPINDLE_CHECK(header_size <= available,
                "{}: header length {} runs past the end of the file ({} bytes after the length); "
                "the file is truncated or not a safetensors file",
                file_name, header_size, available);
  const std::string_view header_text(
      reinterpret_cast<const char*>(file_bytes.data()) + kHeaderLengthBytes, header_size);
  const json header = parse_header_json(header_text, file_name);
  const uint64_t data_size = available - header_size;

  std::vector<TensorInfo> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      read_metadata(entry, file_name, metadata);
      continue;
    }
    tensors.push_back(read_tensor(name, entry, data_size, file_name));
  }
  check_no_overlap(tensors, file_name);
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return tensors;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path, int shard, FileMemory memory)
    : file_(path, memory) {
  tensors_ = parse_safetensors_header(file_.bytes(), path.string(), &metadata_);
  data_offset_ = kHeaderLengthBytes + read_u64_le(file_.bytes());
  for (auto& t : tensors_) t.shard = shard;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const TensorInfo& t, std::string_view n) { return std::string_view(t.name) < n; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

TensorView SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo* info = find(name);
  SPINDLE_CHECK(info != nullptr, "{}: no tensor '{}'", path().string(), name);
  return {info, bytes(*info)};
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& info) const {
  return file_.bytes().subspan(data_offset_ + info.begin, info.num_bytes());
}

Checkpoint::Checkpoint(const std::filesystem::path& model_dir, FileMemory memory) : dir_(model_dir), memory_(memory) {
  const auto index_file = model_dir / kIndexFile;
  const auto single_file = model_dir / kSingleFile;
  if (std::filesystem::exists(index_file)) {
    open_sharded(index_file);
  } else if (std::filesystem::exists(single_file)) {
    open_single(single_file);
  } else {
    SPINDLE_FAIL("{}: no {} or {}; Spindle loads Hugging Face safetensors checkpoints",
                 model_dir.string(), kSingleFile, kIndexFile);
  }
  index_tensors();
}

void Checkpoint::open_single(const std::filesystem::path& file) {
  shards_.push_back(std::make_unique<SafetensorsFile>(file, 0, memory_));
}

void Checkpoint::open_sharded(const std::filesystem::path& index_file) {
  const std::string index_name = index_file.string();
  const json index = json::parse(read_text_file(index_file), nullptr, /*allow_exceptions=*/false);
  SPINDLE_CHECK(!index.is_discarded(), "{}: not valid JSON", index_name);
  SPINDLE_CHECK(index.is_object() && index.contains("weight_map") &&
                    index["weight_map"].is_object(),
                "{}: must be an object with a 'weight_map' object (tensor name -> shard file)",
                index_name);
  const json& weight_map = index["weight_map"];
  SPINDLE_CHECK(!weight_map.empty(), "{}: 'weight_map' is empty", index_name);

  std::map<std::string, int> shard_of_file;
  for (const auto& [tensor, file] : weight_map.items()) {
    SPINDLE_CHECK(file.is_string(), "{}: weight_map['{}'] must be a shard file name, got {}",
                  index_name, tensor, describe(file));
    const auto& file_name = file.get_ref<const std::string&>();
    const std::filesystem::path as_path(file_name);
    SPINDLE_CHECK(!file_name.empty() && as_path.filename() == as_path && file_name != "." &&
                      file_name != "..",
                  "{}: weight_map['{}'] names '{}', which is not a plain file name in the model "
                  "folder",
                  index_name, tensor, file_name);
    if (shard_of_file.count(file_name) != 0) continue;
    const auto shard_path = dir_ / file_name;
    SPINDLE_CHECK(std::filesystem::exists(shard_path),
                  "{}: shard file '{}' named by the index (for tensor '{}') is missing from {}",
                  index_name, file_name, tensor, dir_.string());
    const int shard = static_cast<int>(shards_.size());
    shards_.push_back(std::make_unique<SafetensorsFile>(shard_path, shard, memory_));
    shard_of_file[file_name] = shard;
  }
  for (const auto& [tensor, file] : weight_map.items()) {
    const SafetensorsFile& shard = *shards_[shard_of_file.at(file.get<std::string>())];
    SPINDLE_CHECK(shard.find(tensor) != nullptr,
                  "{}: tensor '{}' is listed in shard '{}', but that file does not hold it",
                  index_name, tensor, shard.path().filename().string());
  }
}

void Checkpoint::index_tensors() {
  std::map<std::string_view, int> owner;
  for (const auto& shard : shards_) {
    for (const auto& t : shard->tensors()) {
      const auto [it, inserted] = owner.emplace(t.name, t.shard);
      SPINDLE_CHECK(inserted, "{}: tensor '{}' appears in two shards: {} and {}", dir_.string(),
                    t.name, shards_[static_cast<size_t>(it->second)]->path().filename().string(),
                    shard->path().filename().string());
    }
  }
  for (const auto& shard : shards_) {
    tensors_.insert(tensors_.end(), shard->tensors().begin(), shard->tensors().end());
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  by_name_.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

TensorView Checkpoint::tensor(std::string_view name) const {
  const TensorInfo* info = find(name);
  SPINDLE_CHECK(info != nullptr, "{}: the checkpoint has no tensor '{}'", dir_.string(), name);
  return {info, shards_[static_cast<size_t>(info->shard)]->bytes(*info)};
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& t : tensors_) total += t.num_bytes();
  return total;
}

}  // namespace spindle
