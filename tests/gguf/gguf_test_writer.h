// A small GGUF writer for tests, written from the GGUF specification (not from Spindle's reader):
// little-endian "GGUF", version, n_tensors, n_kv as u64, the key/value pairs, the tensor infos,
// padding to the alignment, then the tensors' data at their offsets.
//
// Malformed files for the negative tests come from the overrides (magic, version, counts, a
// tensor's stated offset/type/dims) or from editing bytes().
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::gguf::testing {

// The specification's value type ids.
enum : uint32_t {
  kTU8 = 0, kTI8 = 1, kTU16 = 2, kTI16 = 3, kTU32 = 4, kTI32 = 5, kTF32 = 6, kTBool = 7,
  kTString = 8, kTArray = 9, kTU64 = 10, kTI64 = 11, kTF64 = 12,
};

class Bytes {
 public:
  template <typename T>
  Bytes& put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    data.insert(data.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& str(std::string_view s) {
    put<uint64_t>(s.size());
    data.insert(data.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& bytes) {
    data.insert(data.end(), bytes.begin(), bytes.end());
    return *this;
  }
  std::vector<uint8_t> data;
};

struct TestTensor {
  TestTensor(std::string name_, uint32_t type_, std::vector<uint64_t> ne_, std::vector<uint8_t> data_,
             std::optional<uint64_t> offset_ = std::nullopt)
      : name(std::move(name_)), type(type_), ne(std::move(ne_)), data(std::move(data_)),
        offset(offset_) {}
  std::string name;
  uint32_t type = 0;               // ggml type id
  std::vector<uint64_t> ne;        // ne[0] innermost
  std::vector<uint8_t> data;       // written at the next aligned offset
  std::optional<uint64_t> offset;  // stated offset override (relative to the data area)
};

class GgufWriter {
 public:
  char magic[4] = {'G', 'G', 'U', 'F'};
  uint32_t version = 3;
  uint32_t alignment = 32;  // padding used; write "general.alignment" yourself to change it
  std::optional<uint64_t> n_tensors_override;
  std::optional<uint64_t> n_kv_override;

  // A key/value pair whose value bytes (type id first) are given.
  void kv_raw(std::string_view key, const Bytes& typed_value) {
    Bytes b;
    b.str(key).raw(typed_value.data);
    kvs_.push_back(b.data);
  }
  template <typename T>
  void kv(std::string_view key, uint32_t type, T value) {
    Bytes b;
    b.put<uint32_t>(type).put<T>(value);
    kv_raw(key, b);
  }
  void kv_string(std::string_view key, std::string_view value) {
    Bytes b;
    b.put<uint32_t>(kTString).str(value);
    kv_raw(key, b);
  }
  template <typename T>
  void kv_array(std::string_view key, uint32_t element_type, const std::vector<T>& values) {
    Bytes b;
    b.put<uint32_t>(kTArray).put<uint32_t>(element_type).put<uint64_t>(values.size());
    for (const T& v : values) b.put<T>(v);
    kv_raw(key, b);
  }
  void kv_strings(std::string_view key, const std::vector<std::string>& values) {
    Bytes b;
    b.put<uint32_t>(kTArray).put<uint32_t>(kTString).put<uint64_t>(values.size());
    for (const auto& v : values) b.str(v);
    kv_raw(key, b);
  }
  void tensor(TestTensor t) { tensors_.push_back(std::move(t)); }

  std::vector<uint8_t> bytes() const {
    Bytes b;
    b.data.insert(b.data.end(), magic, magic + 4);
    b.put<uint32_t>(version)
        .put<uint64_t>(n_tensors_override.value_or(tensors_.size()))
        .put<uint64_t>(n_kv_override.value_or(kvs_.size()));
    for (const auto& kv : kvs_) b.raw(kv);
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors_) {
      offsets.push_back(next);
      next = align(next + t.data.size());
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      b.str(t.name).put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t n : t.ne) b.put<uint64_t>(n);
      b.put<uint32_t>(t.type).put<uint64_t>(t.offset.value_or(offsets[i]));
    }
    if (tensors_.empty()) return b.data;
    b.data.resize(align(b.data.size()), 0);
    const size_t data_start = b.data.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      b.data.resize(data_start + offsets[i], 0);
      b.raw(tensors_[i].data);
    }
    return b.data;
  }

  void write(const std::filesystem::path& path) const { write_bytes(path, bytes()); }

  static void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }

 private:
  uint64_t align(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }

  std::vector<std::vector<uint8_t>> kvs_;
  std::vector<TestTensor> tensors_;
};

}  // namespace spindle::gguf::testing
