// Test helpers: write safetensors files and checkpoint folders (valid or deliberately broken).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "util/dtype.h"
#include "util/error.h"

namespace spindle::testing {

struct NamedTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;  // exactly num_elements * dtype_size bytes
};

inline uint64_t num_elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// A tensor filled with bytes from a seeded generator.
inline NamedTensor random_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                                 uint32_t seed = 1) {
  NamedTensor t{std::move(name), dtype, std::move(shape), {}};
  t.data.resize(num_elements(t.shape) * dtype_size(dtype));
  std::mt19937 rng(seed);
  for (auto& b : t.data) b = static_cast<std::byte>(rng() & 0xff);
  return t;
}

// [u64 LE header length][header][data], bytes written verbatim.
inline void write_raw_safetensors(const std::filesystem::path& path, uint64_t header_length,
                                  const std::string& header, const std::vector<std::byte>& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SPINDLE_CHECK(out.good(), "cannot write {}", path.string());
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_length >> (8 * i)) & 0xff));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  SPINDLE_CHECK(out.good(), "cannot write {}", path.string());
}

// Writes a well-formed safetensors file: tensors laid out back to back in the given order.
inline void write_safetensors(const std::filesystem::path& path,
                              const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::byte> data;
  for (const auto& t : tensors) {
    SPINDLE_CHECK(t.data.size() == num_elements(t.shape) * dtype_size(t.dtype),
                  "tensor {}: data size does not match shape", t.name);
    const uint64_t begin = data.size();
    data.insert(data.end(), t.data.begin(), t.data.end());
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';  // the reference writer pads to 8-byte alignment
  write_raw_safetensors(path, text.size(), text, data);
}

// Writes shards model-0000i-of-0000n.safetensors and model.safetensors.index.json into dir.
inline void write_sharded_checkpoint(const std::filesystem::path& dir,
                                     const std::vector<std::vector<NamedTensor>>& shards) {
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = "model-0000" + std::to_string(i + 1) + "-of-0000" +
                             std::to_string(shards.size()) + ".safetensors";
    write_safetensors(dir / file, shards[i]);
    for (const auto& t : shards[i]) weight_map[t.name] = file;
  }
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
}

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("spindle_model_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace spindle::testing
