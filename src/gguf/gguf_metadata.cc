#include "gguf/gguf_metadata.h"

#include <bit>
#include <cstring>
#include <limits>

#include "util/error.h"

namespace spindle::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF values are read in place as little-endian");

namespace {

template <typename T>
T load(std::span<const std::byte> bytes, size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kU8: return "uint8";
    case ValueType::kI8: return "int8";
    case ValueType::kU16: return "uint16";
    case ValueType::kI16: return "int16";
    case ValueType::kU32: return "uint32";
    case ValueType::kI32: return "int32";
    case ValueType::kF32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "uint64";
    case ValueType::kI64: return "int64";
    case ValueType::kF64: return "float64";
  }
  return "unknown";
}

std::optional<ValueType> value_type_from_id(uint32_t id) {
  if (id > static_cast<uint32_t>(ValueType::kF64)) return std::nullopt;
  return static_cast<ValueType>(id);
}

size_t value_type_size(ValueType type) {
  switch (type) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    case ValueType::kString: case ValueType::kArray: return 0;
  }
  return 0;
}

bool is_integer_type(ValueType type) {
  switch (type) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kU16: case ValueType::kI16:
    case ValueType::kU32: case ValueType::kI32: case ValueType::kU64: case ValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(ValueType type) { return type == ValueType::kF32 || type == ValueType::kF64; }

Value::Value(ValueType type, ValueType element_type, uint64_t count,
             std::span<const std::byte> elements)
    : type_(type), element_type_(element_type), count_(count), elements_(elements) {
  SPINDLE_CHECK(value_type_size(element_type) != 0 &&
                    elements.size() == count * value_type_size(element_type),
                "gguf::Value: {} elements of {} do not fill {} bytes", count,
                value_type_name(element_type), elements.size());
}

Value::Value(ValueType type, std::vector<std::string_view> strings)
    : type_(type), element_type_(ValueType::kString), count_(strings.size()),
      strings_(std::move(strings)) {}

std::string Value::type_description() const {
  if (!is_array()) return std::string(value_type_name(type_));
  return "array of " + std::string(value_type_name(element_type_));
}

int64_t Value::signed_integer(size_t i) const {
  SPINDLE_CHECK(i < count_, "gguf::Value: element {} of {}", i, count_);
  switch (element_type_) {
    case ValueType::kI8: return load<int8_t>(elements_, i);
    case ValueType::kI16: return load<int16_t>(elements_, i);
    case ValueType::kI32: return load<int32_t>(elements_, i);
    case ValueType::kI64: return load<int64_t>(elements_, i);
    default: SPINDLE_FAIL("gguf::Value: {} is not a signed integer", type_description());
  }
}

uint64_t Value::unsigned_integer(size_t i) const {
  SPINDLE_CHECK(i < count_, "gguf::Value: element {} of {}", i, count_);
  switch (element_type_) {
    case ValueType::kU8: return load<uint8_t>(elements_, i);
    case ValueType::kU16: return load<uint16_t>(elements_, i);
    case ValueType::kU32: return load<uint32_t>(elements_, i);
    case ValueType::kU64: return load<uint64_t>(elements_, i);
    default: SPINDLE_FAIL("gguf::Value: {} is not an unsigned integer", type_description());
  }
}

double Value::floating(size_t i) const {
  SPINDLE_CHECK(i < count_, "gguf::Value: element {} of {}", i, count_);
  switch (element_type_) {
    case ValueType::kF32: return load<float>(elements_, i);
    case ValueType::kF64: return load<double>(elements_, i);
    default: SPINDLE_FAIL("gguf::Value: {} is not a float", type_description());
  }
}

bool Value::boolean(size_t i) const {
  SPINDLE_CHECK(i < count_ && element_type_ == ValueType::kBool, "gguf::Value: {} element {}",
                type_description(), i);
  return load<uint8_t>(elements_, i) != 0;
}

std::string_view Value::string(size_t i) const {
  SPINDLE_CHECK(i < count_ && element_type_ == ValueType::kString, "gguf::Value: {} element {}",
                type_description(), i);
  return strings_[i];
}

void Metadata::add(std::string key, Value value) {
  SPINDLE_CHECK(!index_.contains(key), "{}: duplicate metadata key '{}'", source_name_, key);
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

const Value* Metadata::find(std::string_view key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Metadata::fail_type(std::string_view key, const Value& value,
                         std::string_view expected) const {
  SPINDLE_FAIL("{}: metadata key '{}' holds {} {}, expected {}", source_name_, key,
               value.is_array() ? "an" : "a", value.type_description(), expected);
}

void Metadata::fail_missing(std::string_view key) const {
  SPINDLE_FAIL("{}: missing metadata key '{}'", source_name_, key);
}

int64_t Metadata::element_int(std::string_view key, const Value& value, size_t i) const {
  switch (value.element_type()) {
    case ValueType::kI8: case ValueType::kI16: case ValueType::kI32: case ValueType::kI64:
      return value.signed_integer(i);
    default: {
      const uint64_t u = value.unsigned_integer(i);
      SPINDLE_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                    "{}: metadata key '{}': value {} is out of range", source_name_, key, u);
      return static_cast<int64_t>(u);
    }
  }
}

std::optional<int64_t> Metadata::find_int(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_array() || !is_integer_type(value->type())) fail_type(key, *value, "an integer");
  return element_int(key, *value, 0);
}

std::optional<double> Metadata::find_float(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_array()) fail_type(key, *value, "a number");
  if (is_float_type(value->type())) return value->floating(0);
  if (is_integer_type(value->type())) return static_cast<double>(element_int(key, *value, 0));
  fail_type(key, *value, "a number");
}

std::optional<bool> Metadata::find_bool(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type() != ValueType::kBool) fail_type(key, *value, "a bool");
  return value->boolean(0);
}

std::optional<std::string_view> Metadata::find_string(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type() != ValueType::kString) fail_type(key, *value, "a string");
  return value->string(0);
}

std::optional<std::vector<std::string_view>> Metadata::find_string_array(
    std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array() || value->element_type() != ValueType::kString) {
    fail_type(key, *value, "an array of string");
  }
  return value->strings();
}

std::optional<std::vector<int64_t>> Metadata::find_int_array(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array() || !is_integer_type(value->element_type())) {
    fail_type(key, *value, "an array of integers");
  }
  std::vector<int64_t> out(value->count());
  for (size_t i = 0; i < out.size(); ++i) out[i] = element_int(key, *value, i);
  return out;
}

std::optional<std::vector<double>> Metadata::find_float_array(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array() || !is_float_type(value->element_type())) {
    fail_type(key, *value, "an array of floats");
  }
  std::vector<double> out(value->count());
  for (size_t i = 0; i < out.size(); ++i) out[i] = value->floating(i);
  return out;
}

int64_t Metadata::get_int(std::string_view key) const {
  const auto value = find_int(key);
  if (!value) fail_missing(key);
  return *value;
}

double Metadata::get_float(std::string_view key) const {
  const auto value = find_float(key);
  if (!value) fail_missing(key);
  return *value;
}

std::string_view Metadata::get_string(std::string_view key) const {
  const auto value = find_string(key);
  if (!value) fail_missing(key);
  return *value;
}

}  // namespace spindle::gguf
