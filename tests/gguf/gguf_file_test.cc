// The GGUF container reader against files written by an independent writer (gguf_test_writer.h,
// from the specification), the real llama.cpp vocabulary files against an independent Python
// reader's output (tests/golden/gguf/read_gguf.py), and a table of malformed files.
#include "gguf/gguf_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "gguf_test_writer.h"
#include "support/gunzipped_file.h"
#include "util/error.h"

namespace spindle::gguf {
namespace {

using testing::GgufWriter;
using testing::TestTensor;
namespace t = testing;

std::span<const std::byte> as_span(const std::vector<uint8_t>& bytes) {
  return {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()};
}

std::vector<uint8_t> filled(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + 7 * i);
  return out;
}

std::filesystem::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto dir = std::filesystem::temp_directory_path() /
             ("spindle_gguf_" + std::to_string(getpid()) + "_" + info->name());
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(GgufFile, EveryValueType) {
  GgufWriter w;
  w.kv<uint8_t>("v.u8", t::kTU8, 200);
  w.kv<int8_t>("v.i8", t::kTI8, -100);
  w.kv<uint16_t>("v.u16", t::kTU16, 60000);
  w.kv<int16_t>("v.i16", t::kTI16, -30000);
  w.kv<uint32_t>("v.u32", t::kTU32, 4000000000u);
  w.kv<int32_t>("v.i32", t::kTI32, -2000000000);
  w.kv<float>("v.f32", t::kTF32, 1.5e-5f);
  w.kv<uint8_t>("v.bool", t::kTBool, 1);
  w.kv_string("v.str", "héllo");
  w.kv<uint64_t>("v.u64", t::kTU64, 1ull << 62);
  w.kv<int64_t>("v.i64", t::kTI64, -(1ll << 62));
  w.kv<double>("v.f64", t::kTF64, 0.1);
  w.kv_array<int32_t>("a.i32", t::kTI32, {1, -2, 3});
  w.kv_array<float>("a.f32", t::kTF32, {0.5f, -0.25f});
  w.kv_array<uint8_t>("a.bool", t::kTBool, {1, 0});
  w.kv_array<uint64_t>("a.u64", t::kTU64, {});
  w.kv_strings("a.str", {"", "ab", "\xff\xfe"});
  const auto bytes = w.bytes();
  const Header h = parse_header(as_span(bytes), "values.gguf");
  const Metadata& m = h.metadata;
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 32u);
  ASSERT_EQ(m.size(), 17u);
  EXPECT_EQ(m.entry(0).first, "v.u8");
  EXPECT_EQ(m.get_int("v.u8"), 200);
  EXPECT_EQ(m.get_int("v.i8"), -100);
  EXPECT_EQ(m.get_int("v.u16"), 60000);
  EXPECT_EQ(m.get_int("v.i16"), -30000);
  EXPECT_EQ(m.get_int("v.u32"), 4000000000ll);
  EXPECT_EQ(m.get_int("v.i32"), -2000000000);
  EXPECT_EQ(m.get_float("v.f32"), static_cast<double>(1.5e-5f));
  EXPECT_EQ(m.find_bool("v.bool"), true);
  EXPECT_EQ(m.get_string("v.str"), "héllo");
  EXPECT_EQ(m.get_int("v.u64"), 1ll << 62);
  EXPECT_EQ(m.get_int("v.i64"), -(1ll << 62));
  EXPECT_EQ(m.get_float("v.f64"), 0.1);
  EXPECT_EQ(m.find("v.u32")->type(), ValueType::kU32);
  EXPECT_EQ(m.find_int_array("a.i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(m.find_float_array("a.f32"), (std::vector<double>{0.5, -0.25}));
  EXPECT_TRUE(m.find("a.bool")->boolean(0));
  EXPECT_FALSE(m.find("a.bool")->boolean(1));
  EXPECT_EQ(m.find("a.u64")->count(), 0u);
  EXPECT_EQ(m.find("a.u64")->type_description(), "array of uint64");
  EXPECT_EQ(m.find_string_array("a.str"),
            (std::vector<std::string_view>{"", "ab", "\xff\xfe"}));
  EXPECT_FALSE(m.find_int("absent").has_value());
  EXPECT_TRUE(h.tensors.empty());
}

TEST(GgufFile, TypedGettersNameTheKey) {
  GgufWriter w;
  w.kv_string("k.s", "x");
  w.kv<uint64_t>("k.big", t::kTU64, ~0ull);
  w.kv_array<int32_t>("k.arr", t::kTI32, {1});
  const auto bytes = w.bytes();
  const Header h = parse_header(as_span(bytes), "typed.gguf");
  auto message = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { h.metadata.get_int("k.s"); }),
            "typed.gguf: metadata key 'k.s' holds a string, expected an integer");
  EXPECT_EQ(message([&] { h.metadata.get_int("k.big"); }),
            "typed.gguf: metadata key 'k.big': value 18446744073709551615 is out of range");
  EXPECT_EQ(message([&] { h.metadata.get_int("k.arr"); }),
            "typed.gguf: metadata key 'k.arr' holds an array of int32, expected an integer");
  EXPECT_EQ(message([&] { h.metadata.find_string_array("k.s"); }),
            "typed.gguf: metadata key 'k.s' holds a string, expected an array of string");
  EXPECT_EQ(message([&] { h.metadata.get_string("k.none"); }),
            "typed.gguf: missing metadata key 'k.none'");
}

TEST(GgufFile, TensorInfosAndData) {
  for (const uint32_t alignment : {32u, 64u, 1u}) {
    SCOPED_TRACE(alignment);
    GgufWriter w;
    w.alignment = alignment;
    if (alignment != 32) w.kv<uint32_t>("general.alignment", t::kTU32, alignment);
    w.version = alignment == 1 ? 2 : 3;
    w.tensor({"a.f32", 0, {3}, filled(12, 1)});
    w.tensor({"b.q4_k", 12, {512, 2}, filled(144 * 4, 2)});
    w.tensor({"c.f16", 1, {2, 3, 4}, filled(48, 3)});
    w.tensor({"d.q8_0", 8, {32, 1, 2, 3}, filled(34 * 6, 4)});
    const auto bytes = w.bytes();
    const Header h = parse_header(as_span(bytes), "tensors.gguf");
    EXPECT_EQ(h.version, w.version);
    EXPECT_EQ(h.alignment, alignment);
    EXPECT_EQ(h.data_offset % alignment, 0u);
    ASSERT_EQ(h.tensors.size(), 4u);
    const TensorInfo& q = h.tensors[1];
    EXPECT_EQ(q.name, "b.q4_k");
    EXPECT_EQ(q.type, GgmlType::kQ4_K);
    EXPECT_EQ(q.n_dims, 2);
    EXPECT_EQ(q.ne, (std::array<uint64_t, 4>{512, 2, 1, 1}));
    EXPECT_EQ(q.size, 144u * 4);
    EXPECT_EQ(q.row_bytes(), 288u);
    EXPECT_EQ(h.tensors[3].ne, (std::array<uint64_t, 4>{32, 1, 2, 3}));
    EXPECT_EQ(h.tensors[3].num_rows(), 6u);
    for (size_t i = 0; i < 4; ++i) {
      const TensorInfo& ti = h.tensors[i];
      EXPECT_EQ(ti.offset % alignment, h.data_offset % alignment);
      const std::vector<uint8_t> got(bytes.begin() + ti.offset, bytes.begin() + ti.offset + ti.size);
      EXPECT_EQ(got, filled(ti.size, static_cast<uint8_t>(i + 1))) << ti.name;
    }
  }
}

// ---- Malformed files: every case is an error naming the file and what was wrong. ----

struct BadCase {
  std::string name;
  std::function<std::vector<uint8_t>()> bytes;
  std::vector<std::string> expected;  // substrings of the message
};

GgufWriter one_tensor_writer() {
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  w.tensor({"w", 0, {8}, filled(32, 0)});
  return w;
}

std::vector<uint8_t> with(const std::function<void(GgufWriter&)>& edit) {
  GgufWriter w = one_tensor_writer();
  edit(w);
  return w.bytes();
}

std::vector<uint8_t> with_tensor(TestTensor tensor) {
  GgufWriter w;
  w.tensor(std::move(tensor));
  return w.bytes();
}

std::vector<BadCase> bad_cases() {
  using V = std::vector<uint8_t>;
  return {
      {"empty", [] { return V{}; }, {"truncated file", "magic"}},
      {"three_bytes", [] { return V{'G', 'G', 'U'}; }, {"truncated file", "needs 4 bytes, only 3"}},
      {"bad_magic", [] { return with([](GgufWriter& w) { std::memcpy(w.magic, "GGML", 4); }); },
       {"bad magic", "47 47 4d 4c", "not a GGUF file"}},
      {"version_1", [] { return with([](GgufWriter& w) { w.version = 1; }); }, {"version 1 is not supported"}},
      {"version_4", [] { return with([](GgufWriter& w) { w.version = 4; }); }, {"unsupported GGUF version 4"}},
      {"big_endian", [] { return with([](GgufWriter& w) { w.version = 3u << 24; }); }, {"big-endian"}},
      {"truncated_counts", [] { auto b = with([](GgufWriter&) {}); b.resize(12); return b; },
       {"truncated file", "n_tensors", "offset 8"}},
      {"n_tensors_absurd", [] { return with([](GgufWriter& w) { w.n_tensors_override = 1ull << 60; }); },
       {"n_tensors is 1152921504606846976, absurd"}},
      {"n_kv_absurd", [] { return with([](GgufWriter& w) { w.n_kv_override = ~0ull; }); },
       {"n_kv (the metadata count) is 18446744073709551615, absurd"}},
      {"truncated_value",
       [] {
         GgufWriter w;
         w.kv_string("a.b", "c");
         w.kv<uint64_t>("x.y", t::kTU64, 5);
         auto b = w.bytes();
         b.resize(b.size() - 4);
         return b;
       },
       {"truncated file: metadata key 'x.y' at offset 63 needs 8 bytes, only 4 left"}},
      {"key_length_past_end",
       [] { return with([](GgufWriter& w) { w.kv_raw("", t::Bytes{}); w.n_kv_override = 2; }); },
       {"metadata key #1 has length 0"}},
      {"string_length_past_end",
       [] {
         GgufWriter w;
         t::Bytes b;
         b.put<uint32_t>(t::kTString).put<uint64_t>(1000).put<uint8_t>('x');
         w.kv_raw("k.s", b);
         return w.bytes();
       },
       {"metadata key 'k.s': string length 1000", "runs past the end"}},
      {"key_string_past_end",
       [] { auto b = with([](GgufWriter&) {}); b[24] = 0xff; return b; },
       {"metadata key #0: string length 255", "runs past the end"}},
      {"unknown_value_type",
       [] { return with([](GgufWriter& w) { w.kv<uint32_t>("k.t", 13, 0); }); },
       {"metadata key 'k.t': value type: unknown value type id 13"}},
      {"array_of_arrays",
       [] { return with([](GgufWriter& w) { w.kv_array<uint32_t>("k.a", t::kTArray, {0}); }); },
       {"metadata key 'k.a': arrays of arrays are not supported"}},
      {"array_unknown_element",
       [] { return with([](GgufWriter& w) { w.kv_array<uint32_t>("k.a", 77, {0}); }); },
       {"metadata key 'k.a': array element type: unknown value type id 77"}},
      {"array_past_end",
       [] {
         GgufWriter w;
         t::Bytes b;
         b.put<uint32_t>(t::kTArray).put<uint32_t>(t::kTF32).put<uint64_t>(1ull << 40);
         w.kv_raw("k.a", b);
         return w.bytes();
       },
       {"metadata key 'k.a': array of 1099511627776 float32 values runs past the end"}},
      {"string_array_past_end",
       [] {
         GgufWriter w;
         t::Bytes b;
         b.put<uint32_t>(t::kTArray).put<uint32_t>(t::kTString).put<uint64_t>(~0ull >> 1);
         w.kv_raw("k.a", b);
         return w.bytes();
       },
       {"metadata key 'k.a': array of 9223372036854775807 strings runs past the end"}},
      {"bool_not_0_1", [] { return with([](GgufWriter& w) { w.kv<uint8_t>("k.b", t::kTBool, 2); }); },
       {"metadata key 'k.b': bool value 2 is neither 0 nor 1"}},
      {"duplicate_key",
       [] { return with([](GgufWriter& w) { w.kv_string("general.architecture", "qwen2"); }); },
       {"duplicate metadata key 'general.architecture'"}},
      {"alignment_not_power_of_two",
       [] { return with([](GgufWriter& w) { w.kv<uint32_t>("general.alignment", t::kTU32, 24); }); },
       {"metadata key 'general.alignment' is 24, not a power of two"}},
      {"alignment_zero",
       [] { return with([](GgufWriter& w) { w.kv<uint32_t>("general.alignment", t::kTU32, 0); }); },
       {"metadata key 'general.alignment' is 0"}},
      {"alignment_string",
       [] { return with([](GgufWriter& w) { w.kv_string("general.alignment", "32"); }); },
       {"metadata key 'general.alignment' holds a string, expected an integer"}},
      {"tensor_name_empty", [] { return with_tensor({"", 0, {1}, filled(4, 0)}); },
       {"tensor #0 name '' has length 0"}},
      {"tensor_name_too_long", [] { return with_tensor({std::string(64, 'n'), 0, {1}, filled(4, 0)}); },
       {"has length 64 (must be 1 to 63)"}},
      {"n_dims_zero", [] { return with_tensor({"w", 0, {}, filled(4, 0)}); },
       {"tensor 'w': n_dims 0 (must be 1 to 4)"}},
      {"n_dims_five", [] { return with_tensor({"w", 0, {1, 1, 1, 1, 1}, filled(4, 0)}); },
       {"tensor 'w': n_dims 5 (must be 1 to 4)"}},
      {"dimension_zero", [] { return with_tensor({"w", 0, {4, 0}, {}}); },
       {"tensor 'w': dimension 1 is 0"}},
      {"dimension_negative", [] { return with_tensor({"w", 0, {~0ull}, {}}); },
       {"tensor 'w': dimension 0 is -1"}},
      {"element_count_overflow",
       [] { return with_tensor({"w", 0, {1ull << 40, 1ull << 40}, {}}); },
       {"tensor 'w': the element count overflows"}},
      {"byte_size_overflow", [] { return with_tensor({"w", 0, {1ull << 62}, {}}); },
       {"tensor 'w': the byte size overflows"}},
      {"removed_type_id", [] { return with_tensor({"w", 4, {32}, filled(20, 0)}); },
       {"tensor 'w': unknown ggml type id 4"}},
      {"unknown_type_id", [] { return with_tensor({"w", 99, {32}, filled(20, 0)}); },
       {"tensor 'w': unknown ggml type id 99"}},
      {"row_not_whole_blocks", [] { return with_tensor({"w", 12, {100}, filled(144, 0)}); },
       {"tensor 'w': ne[0] = 100 is not a multiple of the Q4_K block size 256"}},
      {"misaligned_offset", [] { return with_tensor({"w", 0, {1}, filled(4, 0), 4}); },
       {"tensor 'w': data offset 4 is not a multiple of the alignment 32"}},
      {"data_past_end", [] { auto b = with_tensor({"w", 0, {8}, filled(32, 0)}); b.pop_back(); return b; },
       {"tensor 'w': data at offset", "runs past the end of the file"}},
      {"offset_past_end", [] { return with_tensor({"w", 0, {8}, filled(32, 0), 1ull << 63}); },
       {"tensor 'w'", "runs past the end of the file"}},
      {"truncated_tensor_info",
       [] {
         GgufWriter w;
         w.kv_string("k", std::string(40, 's'));
         w.tensor({"w", 0, {8}, {}});
         auto b = w.bytes();
         b.resize(24 + 61 + 9 + 4 + 8 + 4 + 2);  // counts, the pair, 2 bytes into the offset
         return b;
       },
       {"truncated file: tensor 'w' offset at offset 110 needs 8 bytes, only 2 left"}},
      {"duplicate_tensor",
       [] { return with([](GgufWriter& w) { w.tensor({"w", 0, {8}, filled(32, 0)}); }); },
       {"duplicate tensor name 'w' (tensors #0 and #1)"}},
      {"overlapping_tensors",
       [] { return with([](GgufWriter& w) { w.tensor({"v", 0, {16}, filled(64, 0), 0}); }); },
       {"tensors 'w' and 'v' overlap"}},
  };
}

class GgufMalformed : public ::testing::TestWithParam<BadCase> {};

TEST_P(GgufMalformed, IsAnErrorNamingFileAndFault) {
  const BadCase& c = GetParam();
  const auto bytes = c.bytes();
  try {
    parse_header(as_span(bytes), "bad.gguf");
    FAIL() << "no error for " << c.name;
  } catch (const Error& e) {
    const std::string message = e.message();
    EXPECT_EQ(message.rfind("bad.gguf: ", 0), 0u) << message;
    for (const auto& part : c.expected) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GgufMalformed, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

// Every truncation of a valid file is an error, never a crash or a success.
TEST(GgufFile, EveryTruncationIsAnError) {
  GgufWriter w = one_tensor_writer();
  w.kv_strings("k.strs", {"a", "bc"});
  w.kv_array<float>("k.f", t::kTF32, {1, 2});
  const auto bytes = w.bytes();
  ASSERT_NO_THROW(parse_header(as_span(bytes), "whole.gguf"));
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    EXPECT_THROW(parse_header(as_span(cut), "cut.gguf"), Error) << n;
  }
}

// ---- Split models ----

void write_split(const std::filesystem::path& path, int no, int count, int total_tensors,
                 const std::vector<TestTensor>& tensors) {
  GgufWriter w;
  if (no == 0) w.kv_string("general.architecture", "llama");
  w.kv<uint16_t>("split.no", t::kTU16, static_cast<uint16_t>(no));
  w.kv<uint16_t>("split.count", t::kTU16, static_cast<uint16_t>(count));
  w.kv<int32_t>("split.tensors.count", t::kTI32, total_tensors);
  for (const auto& tensor : tensors) w.tensor(tensor);
  w.write(path);
}

TEST(GgufFile, SplitModelServedFromTheFirstPart) {
  const auto dir = temp_dir();
  write_split(dir / "m-00001-of-00003.gguf", 0, 3, 4, {{"a", 0, {4}, filled(16, 1)}});
  write_split(dir / "m-00002-of-00003.gguf", 1, 3, 4,
              {{"b", 0, {2}, filled(8, 2)}, {"c", 8, {32}, filled(34, 3)}});
  write_split(dir / "m-00003-of-00003.gguf", 2, 3, 4, {{"d", 1, {2, 2}, filled(8, 4)}});
  const GgufFile file(dir / "m-00001-of-00003.gguf");
  EXPECT_EQ(file.num_splits(), 3u);
  EXPECT_EQ(file.metadata().get_string("general.architecture"), "llama");
  ASSERT_EQ(file.tensors().size(), 4u);
  const std::vector<std::pair<std::string, int>> expected{{"a", 0}, {"b", 1}, {"c", 1}, {"d", 2}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorInfo& ti = file.tensor(expected[i].first);
    EXPECT_EQ(ti.split, expected[i].second);
    const auto data = file.tensor_data(ti);
    const std::vector<uint8_t> got(reinterpret_cast<const uint8_t*>(data.data()),
                                   reinterpret_cast<const uint8_t*>(data.data()) + data.size());
    EXPECT_EQ(got, filled(ti.size, static_cast<uint8_t>(i + 1)));
  }
  EXPECT_EQ(file.find_tensor("e"), nullptr);
  try {
    file.tensor("e");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("missing tensor 'e'"), std::string::npos) << e.message();
  }

  // Opening a later part is an error pointing at the first.
  EXPECT_THROW(
      {
        try {
          GgufFile(dir / "m-00002-of-00003.gguf");
        } catch (const Error& e) {
          EXPECT_NE(e.message().find("part 2 of a 3-part split model; open the first part"),
                    std::string::npos) << e.message();
          throw;
        }
      },
      Error);
  std::filesystem::remove_all(dir);
}

std::string open_error(const std::filesystem::path& path) {
  try {
    GgufFile file(path);
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(GgufFile, BrokenSplitModelsAreErrors) {
  const auto dir = temp_dir();
  const auto first = dir / "m-00001-of-00002.gguf";
  const auto second = dir / "m-00002-of-00002.gguf";
  write_split(first, 0, 2, 2, {{"a", 0, {4}, filled(16, 1)}});
  EXPECT_NE(open_error(first).find("part 2 of the 2-part split model is missing"),
            std::string::npos) << open_error(first);
  write_split(second, 0, 2, 2, {{"b", 0, {4}, filled(16, 1)}});
  EXPECT_NE(open_error(first).find("metadata says part 1 of 2"), std::string::npos)
      << open_error(first);
  write_split(second, 1, 2, 2, {{"b", 0, {4}, filled(16, 1)}});
  EXPECT_EQ(open_error(first), "no error");
  write_split(first, 0, 2, 3, {{"a", 0, {4}, filled(16, 1)}});
  EXPECT_NE(open_error(first).find("'split.tensors.count' is 3, but the 2 parts hold 2"),
            std::string::npos) << open_error(first);
  write_split(first, 0, 2, 2, {{"a", 0, {4}, filled(16, 1)}});
  EXPECT_EQ(open_error(first), "no error");
  write_split(second, 1, 2, 2, {{"a", 0, {4}, filled(16, 1)}});
  EXPECT_NE(open_error(first).find("tensor 'a' appears in part 1 and again in part 2"),
            std::string::npos) << open_error(first);
  const auto renamed = dir / "model.gguf";
  std::filesystem::copy_file(first, renamed);
  EXPECT_NE(open_error(renamed).find("must be named '<name>-00001-of-00002.gguf'"),
            std::string::npos) << open_error(renamed);
  std::filesystem::remove_all(dir);
}

// ---- The llama.cpp snapshot's vocabulary files against the independent Python reader ----

void expect_value_matches(const Metadata& m, const nlohmann::json& kv) {
  const std::string key = kv["key"];
  const Value* value = m.find(key);
  ASSERT_NE(value, nullptr) << key;
  EXPECT_EQ(value->type_description(), kv["type"].get<std::string>()) << key;
  const auto& expected = kv["value"];
  auto element = [&](size_t i) -> nlohmann::json {
    const ValueType type = value->element_type();
    if (type == ValueType::kString) return std::string(value->string(i));
    if (type == ValueType::kBool) return value->boolean(i);
    if (is_float_type(type)) return value->floating(i);
    if (type == ValueType::kI8 || type == ValueType::kI16 || type == ValueType::kI32 ||
        type == ValueType::kI64) {
      return value->signed_integer(i);
    }
    return value->unsigned_integer(i);
  };
  if (!value->is_array()) {
    EXPECT_EQ(element(0), expected) << key;
    return;
  }
  ASSERT_EQ(value->count(), expected["count"].get<uint64_t>()) << key;
  for (const auto& [index, pick] : expected["picks"].items()) {
    EXPECT_EQ(element(std::stoull(index)), pick) << key << "[" << index << "]";
  }
  if (expected.contains("bytes")) {
    uint64_t bytes = 0;
    for (auto s : value->strings()) bytes += s.size();
    EXPECT_EQ(bytes, expected["bytes"].get<uint64_t>()) << key;
  }
  if (expected.contains("sum")) {
    double sum = 0;
    for (size_t i = 0; i < value->count(); ++i) sum += element(i).get<double>();
    EXPECT_EQ(sum, expected["sum"].get<double>()) << key;  // the same float64 sum in index order
  }
}

class GgufVocabFile : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVocabFile, MatchesTheIndependentReader) {
  const std::filesystem::path dir = std::filesystem::path(SPINDLE_SOURCE_DIR) / "tests/golden/gguf";
  const auto path = dir / (GetParam() + ".gguf.gz");  // stored gzip-compressed (SOURCE.md)
  std::ifstream in(dir / (GetParam() + ".gguf.expected.json"));
  ASSERT_TRUE(in) << "missing expectation for " << path;
  const auto expected = nlohmann::json::parse(in);
  const spindle::testing::GunzippedFile unpacked(path);
  const GgufFile file(unpacked.path());
  EXPECT_EQ(file.version(), expected["version"].get<uint32_t>());
  const Metadata& m = file.metadata();
  ASSERT_EQ(m.size(), expected["metadata"].size());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m.entry(i).first, expected["metadata"][i]["key"].get<std::string>());
    expect_value_matches(m, expected["metadata"][i]);
  }
  EXPECT_EQ(file.tensors().size(), expected["tensors"].size());
}

// The same reading from a copy in transparent huge pages (FileMemory::kHugePageCopy).
TEST(GgufFile, HugePageCopyReadsTheSame) {
  const spindle::testing::GunzippedFile unpacked(std::filesystem::path(SPINDLE_SOURCE_DIR) /
                                                 "tests/golden/gguf/ggml-vocab-llama-spm.gguf.gz");
  const GgufFile mapped(unpacked.path());
  const GgufFile copied(unpacked.path(), FileMemory::kHugePageCopy);
  ASSERT_EQ(copied.metadata().size(), mapped.metadata().size());
  EXPECT_EQ(copied.metadata().find_string_array("tokenizer.ggml.tokens"),
            mapped.metadata().find_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(copied.metadata().find_float_array("tokenizer.ggml.scores"),
            mapped.metadata().find_float_array("tokenizer.ggml.scores"));
}

INSTANTIATE_TEST_SUITE_P(Snapshot, GgufVocabFile,
                         ::testing::Values("ggml-vocab-llama-spm", "ggml-vocab-gpt-2"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace spindle::gguf
