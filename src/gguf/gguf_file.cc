#include "gguf/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "util/error.h"

namespace spindle::gguf {
namespace {

constexpr size_t kMaxKeyLength = 65535;  // the format's limit on key length
// The smallest key/value pair (a 1-byte key and a 1-byte value) and the smallest tensor info
// (a 1-byte name, one dimension): counts above remaining bytes / these are absurd.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

// Sequential little-endian reads over the file's bytes; every overrun is an error naming the file,
// what was being read and where.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, std::string_view source) : bytes_(bytes), source_(source) {}

  size_t position() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  std::string_view source() const { return source_; }

  std::span<const std::byte> take(uint64_t n, std::string_view what) {
    SPINDLE_CHECK(n <= remaining(),
                  "{}: truncated file: {} at offset {} needs {} bytes, only {} left", source_,
                  what, pos_, n, remaining());
    const auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }

  template <typename T>
  T read(std::string_view what) {
    T value;
    std::memcpy(&value, take(sizeof(T), what).data(), sizeof(T));
    return value;
  }

  std::string_view read_string(std::string_view what) {
    const size_t at = pos_;
    const auto length = read<uint64_t>(what);
    SPINDLE_CHECK(length <= remaining(),
                  "{}: {}: string length {} at offset {} runs past the end of the file ({} bytes "
                  "left)", source_, what, length, at, remaining());
    const auto bytes = take(length, what);
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }

 private:
  std::span<const std::byte> bytes_;
  std::string_view source_;
  size_t pos_ = 0;
};

uint32_t check_version(Reader& reader) {
  const auto magic = reader.take(4, "the magic 'GGUF'");
  if (std::memcmp(magic.data(), "GGUF", 4) != 0) {
    const auto* m = reinterpret_cast<const unsigned char*>(magic.data());
    SPINDLE_FAIL("{}: bad magic: expected 'GGUF' (47 47 55 46), found {:02x} {:02x} {:02x} {:02x}; "
                 "not a GGUF file", reader.source(), m[0], m[1], m[2], m[3]);
  }
  const auto version = reader.read<uint32_t>("the version");
  SPINDLE_CHECK(version != 1, "{}: GGUF version 1 is not supported (only versions 2 and 3)",
                reader.source());
  SPINDLE_CHECK((version & 0xffffu) != 0,
                "{}: GGUF version field {:#x} looks big-endian; only little-endian GGUF files are "
                "supported", reader.source(), version);
  SPINDLE_CHECK(version == 2 || version == 3,
                "{}: unsupported GGUF version {} (only versions 2 and 3)", reader.source(), version);
  return version;
}

uint64_t read_count(Reader& reader, std::string_view what, uint64_t min_bytes_each) {
  const auto count = reader.read<uint64_t>(what);
  SPINDLE_CHECK(count <= reader.remaining() / min_bytes_each,
                "{}: {} is {}, absurd for the {} bytes left after the header counts (each takes at "
                "least {} bytes)", reader.source(), what, count, reader.remaining(), min_bytes_each);
  return count;
}

ValueType read_value_type(Reader& reader, const std::string& what) {
  const auto id = reader.read<uint32_t>(what);
  const auto type = value_type_from_id(id);
  SPINDLE_CHECK(type.has_value(), "{}: {}: unknown value type id {}", reader.source(), what, id);
  return *type;
}

Value read_array(Reader& reader, const std::string& what) {
  const ValueType element = read_value_type(reader, what + ": array element type");
  SPINDLE_CHECK(element != ValueType::kArray, "{}: {}: arrays of arrays are not supported",
                reader.source(), what);
  const auto count = reader.read<uint64_t>(what + ": array length");
  if (element == ValueType::kString) {
    SPINDLE_CHECK(count <= reader.remaining() / 8,
                  "{}: {}: array of {} strings runs past the end of the file ({} bytes left)",
                  reader.source(), what, count, reader.remaining());
    std::vector<std::string_view> strings(count);
    for (auto& s : strings) s = reader.read_string(what);
    return Value(ValueType::kArray, std::move(strings));
  }
  const size_t size = value_type_size(element);
  SPINDLE_CHECK(count <= reader.remaining() / size,
                "{}: {}: array of {} {} values runs past the end of the file ({} bytes left)",
                reader.source(), what, count, value_type_name(element), reader.remaining());
  const auto elements = reader.take(count * size, what);
  if (element == ValueType::kBool) {
    for (const std::byte b : elements) {
      SPINDLE_CHECK(static_cast<uint8_t>(b) <= 1, "{}: {}: bool value {} is neither 0 nor 1",
                    reader.source(), what, static_cast<unsigned>(b));
    }
  }
  return Value(ValueType::kArray, element, count, elements);
}

Value read_value(Reader& reader, ValueType type, const std::string& what) {
  if (type == ValueType::kArray) return read_array(reader, what);
  if (type == ValueType::kString) return Value(ValueType::kString, {reader.read_string(what)});
  const auto bytes = reader.take(value_type_size(type), what);
  SPINDLE_CHECK(type != ValueType::kBool || static_cast<uint8_t>(bytes[0]) <= 1,
                "{}: {}: bool value {} is neither 0 nor 1", reader.source(), what,
                static_cast<unsigned>(bytes[0]));
  return Value(type, type, 1, bytes);
}

void read_metadata(Reader& reader, uint64_t n_kv, Metadata& metadata) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string_view key = reader.read_string(fmt::format("metadata key #{}", i));
    SPINDLE_CHECK(!key.empty() && key.size() <= kMaxKeyLength,
                  "{}: metadata key #{} has length {} (must be 1 to {})", reader.source(), i,
                  key.size(), kMaxKeyLength);
    const std::string what = fmt::format("metadata key '{}'", key);
    const ValueType type = read_value_type(reader, what + ": value type");
    metadata.add(std::string(key), read_value(reader, type, what));
  }
}

uint32_t read_alignment(const Metadata& metadata) {
  const auto alignment = metadata.find_int("general.alignment");
  if (!alignment) return kDefaultAlignment;
  SPINDLE_CHECK(*alignment > 0 && *alignment <= (1 << 30) && std::has_single_bit(static_cast<uint64_t>(*alignment)),
                "{}: metadata key 'general.alignment' is {}, not a power of two up to 2^30",
                metadata.source_name(), *alignment);
  return static_cast<uint32_t>(*alignment);
}

// Shape and type of one tensor info; sets n_dims, ne, type and size.
void read_shape_and_type(Reader& reader, TensorInfo& t) {
  const auto n_dims = reader.read<uint32_t>("tensor '" + t.name + "' n_dims");
  SPINDLE_CHECK(n_dims >= 1 && n_dims <= kMaxDims, "{}: tensor '{}': n_dims {} (must be 1 to {})",
                reader.source(), t.name, n_dims, kMaxDims);
  t.n_dims = static_cast<int>(n_dims);
  uint64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    t.ne[d] = reader.read<uint64_t>("tensor '" + t.name + "' dimensions");
    SPINDLE_CHECK(t.ne[d] >= 1 && t.ne[d] <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                  "{}: tensor '{}': dimension {} is {} (must be at least 1)", reader.source(),
                  t.name, d, static_cast<int64_t>(t.ne[d]));
    SPINDLE_CHECK(!__builtin_mul_overflow(elements, t.ne[d], &elements) &&
                      elements <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                  "{}: tensor '{}': the element count overflows", reader.source(), t.name);
  }
  const auto type_id = reader.read<uint32_t>("tensor '" + t.name + "' type");
  const auto type = ggml_type_from_id(type_id);
  SPINDLE_CHECK(type.has_value(), "{}: tensor '{}': unknown ggml type id {}", reader.source(),
                t.name, type_id);
  t.type = *type;
  const uint32_t block = ggml_block_elements(t.type);
  SPINDLE_CHECK(t.ne[0] % block == 0,
                "{}: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}",
                reader.source(), t.name, t.ne[0], ggml_type_name(t.type), block);
  uint64_t row_bytes = 0;
  SPINDLE_CHECK(!__builtin_mul_overflow(t.ne[0] / block, ggml_block_bytes(t.type), &row_bytes) &&
                    !__builtin_mul_overflow(row_bytes, t.num_rows(), &t.size),
                "{}: tensor '{}': the byte size overflows", reader.source(), t.name);
}

std::vector<TensorInfo> read_tensor_infos(Reader& reader, uint64_t n_tensors, uint32_t alignment) {
  std::vector<TensorInfo> tensors(n_tensors);
  std::unordered_map<std::string_view, size_t> seen;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo& t = tensors[i];
    t.name = std::string(reader.read_string(fmt::format("tensor #{} name", i)));
    SPINDLE_CHECK(!t.name.empty() && t.name.size() <= kMaxTensorName,
                  "{}: tensor #{} name '{}' has length {} (must be 1 to {})", reader.source(), i,
                  t.name, t.name.size(), kMaxTensorName);
    read_shape_and_type(reader, t);
    t.offset = reader.read<uint64_t>("tensor '" + t.name + "' offset");
    SPINDLE_CHECK(t.offset % alignment == 0,
                  "{}: tensor '{}': data offset {} is not a multiple of the alignment {}",
                  reader.source(), t.name, t.offset, alignment);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto [it, inserted] = seen.emplace(tensors[i].name, i);
    SPINDLE_CHECK(inserted, "{}: duplicate tensor name '{}' (tensors #{} and #{})", reader.source(),
                  tensors[i].name, it->second, i);
  }
  return tensors;
}

// Resolves the offsets against the data area and checks every range lies in the file without
// overlapping another.
void place_tensors(std::vector<TensorInfo>& tensors, uint64_t data_offset, uint64_t file_size,
                   std::string_view source) {
  for (TensorInfo& t : tensors) {
    const uint64_t available = file_size > data_offset ? file_size - data_offset : 0;
    SPINDLE_CHECK(t.offset <= available && t.size <= available - t.offset,
                  "{}: tensor '{}': data at offset {} + {} of {} bytes runs past the end of the file "
                  "({} bytes, data area from {})", source, t.name, data_offset, t.offset, t.size,
                  file_size, data_offset);
    t.offset += data_offset;
  }
  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    SPINDLE_CHECK(order[i]->offset >= order[i - 1]->offset + order[i - 1]->size,
                  "{}: tensors '{}' and '{}' overlap (bytes [{}, {}) and [{}, {}))", source,
                  order[i - 1]->name, order[i]->name, order[i - 1]->offset,
                  order[i - 1]->offset + order[i - 1]->size, order[i]->offset,
                  order[i]->offset + order[i]->size);
  }
}

}  // namespace

Header parse_header(std::span<const std::byte> bytes, std::string_view source_name) {
  Reader reader(bytes, source_name);
  Header header;
  header.metadata = Metadata(std::string(source_name));
  header.version = check_version(reader);
  const uint64_t n_tensors = reader.read<uint64_t>("n_tensors");
  const uint64_t n_kv = read_count(reader, "n_kv (the metadata count)", kMinKvBytes);
  SPINDLE_CHECK(n_tensors <= reader.remaining() / kMinTensorInfoBytes,
                "{}: n_tensors is {}, absurd for the {} bytes left after the header counts (each "
                "tensor info takes at least {} bytes)", source_name, n_tensors, reader.remaining(),
                kMinTensorInfoBytes);
  read_metadata(reader, n_kv, header.metadata);
  header.alignment = read_alignment(header.metadata);
  header.tensors = read_tensor_infos(reader, n_tensors, header.alignment);
  const uint64_t end = reader.position();
  header.data_offset = (end + header.alignment - 1) / header.alignment * header.alignment;
  place_tensors(header.tensors, header.data_offset, bytes.size(), source_name);
  return header;
}

}  // namespace spindle::gguf
