// GGUF metadata: typed key/value pairs read in place from a file's bytes.
//
// A Value refers into the file's memory (strings are string_views into it), so a Metadata lives
// no longer than the bytes it was parsed from (GgufFile keeps both together). Values are
// little-endian in the file; Spindle runs on little-endian hosts only.
//
// Typed getters check the stored type and name the source file and the key in every error, e.g.
//   "model.gguf: metadata key 'llama.block_count' holds a string, expected an integer".
// Integers of any width and signedness are read as int64 (a uint64 above INT64_MAX is an error);
// floats of either width as double; a bool is only a bool; arrays of arrays are rejected by the
// parser.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace spindle::gguf {

// The file format's value type ids.
enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// "uint8", "int32", "float32", "bool", "string", "array", ...
std::string_view value_type_name(ValueType type);
// nullopt for an id above 12.
std::optional<ValueType> value_type_from_id(uint32_t id);
// Bytes of one element in the file; 0 for string and array (variable size).
size_t value_type_size(ValueType type);
bool is_integer_type(ValueType type);
bool is_float_type(ValueType type);

// One metadata value: a scalar (count() == 1) or an array of scalars or strings.
class Value {
 public:
  // A scalar or array of fixed-size elements: `elements` holds count * value_type_size bytes.
  Value(ValueType type, ValueType element_type, uint64_t count, std::span<const std::byte> elements);
  // A string, or an array of strings.
  Value(ValueType type, std::vector<std::string_view> strings);

  ValueType type() const { return type_; }                  // kArray for arrays
  ValueType element_type() const { return element_type_; }  // the scalar's type for scalars
  bool is_array() const { return type_ == ValueType::kArray; }
  uint64_t count() const { return count_; }  // 1 for a scalar
  // "uint32" or "array of string" (for error messages).
  std::string type_description() const;

  // Element i (0 for a scalar); the element type must match the accessor (checked by Metadata's
  // getters; here a mismatch throws a generic spindle::Error).
  int64_t signed_integer(size_t i) const;     // kI8/kI16/kI32/kI64
  uint64_t unsigned_integer(size_t i) const;  // kU8/kU16/kU32/kU64
  double floating(size_t i) const;            // kF32/kF64
  bool boolean(size_t i) const;               // kBool
  std::string_view string(size_t i) const;    // kString
  const std::vector<std::string_view>& strings() const { return strings_; }

 private:
  ValueType type_;
  ValueType element_type_;
  uint64_t count_ = 0;
  std::span<const std::byte> elements_;
  std::vector<std::string_view> strings_;
};

// All key/value pairs of one file, in file order, with lookup by key.
class Metadata {
 public:
  explicit Metadata(std::string source_name = {}) : source_name_(std::move(source_name)) {}

  // Throws when the key is already present ("duplicate metadata key").
  void add(std::string key, Value value);

  const std::string& source_name() const { return source_name_; }
  size_t size() const { return entries_.size(); }
  const std::pair<std::string, Value>& entry(size_t i) const { return entries_[i]; }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const Value* find(std::string_view key) const;

  // nullopt when the key is absent; a present key of another type is an error naming it.
  std::optional<int64_t> find_int(std::string_view key) const;
  std::optional<double> find_float(std::string_view key) const;  // floats, or integers
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<std::string_view> find_string(std::string_view key) const;
  std::optional<std::vector<std::string_view>> find_string_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> find_int_array(std::string_view key) const;
  std::optional<std::vector<double>> find_float_array(std::string_view key) const;

  // As the find_ forms, but an absent key is an error ("missing metadata key 'x'").
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::string_view get_string(std::string_view key) const;

 private:
  [[noreturn]] void fail_type(std::string_view key, const Value& value,
                              std::string_view expected) const;
  [[noreturn]] void fail_missing(std::string_view key) const;
  int64_t element_int(std::string_view key, const Value& value, size_t i) const;

  std::string source_name_;
  std::vector<std::pair<std::string, Value>> entries_;
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view key) const { return std::hash<std::string_view>{}(key); }
  };
  std::unordered_map<std::string, size_t, KeyHash, std::equal_to<>> index_;
};

}  // namespace spindle::gguf
