// Safetensors reading: round trips through the test writer, and one test per malformed input,
// each checking the specific error text (file and tensor named).
#include "model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "safetensors_writer.h"
#include "support/error_of.h"
#include "util/error.h"

namespace spindle {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::NamedTensor;
using testing::random_tensor;
using testing::TempDir;
using testing::write_raw_safetensors;
using testing::write_safetensors;
using testing::write_sharded_checkpoint;

// [u64 LE length][header][data] in memory.
std::vector<std::byte> file_bytes(const std::string& header, size_t num_data_bytes = 0,
                                  std::optional<uint64_t> header_length = std::nullopt) {
  const uint64_t length = header_length.value_or(header.size());
  std::vector<std::byte> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::byte>((length >> (8 * i)) & 0xff));
  for (const char c : header) bytes.push_back(static_cast<std::byte>(c));
  bytes.resize(bytes.size() + num_data_bytes, std::byte{0});
  return bytes;
}

using testing::error_of;

std::string header_error(const std::vector<std::byte>& bytes) {
  return error_of([&] { parse_safetensors_header(bytes, "weights.safetensors"); });
}

std::vector<NamedTensor> sample_tensors() {
  return {random_tensor("b.weight", DType::kBF16, {3, 5}, 1),
          random_tensor("a.weight", DType::kF32, {7}, 2),
          random_tensor("c.scalar", DType::kF16, {}, 3),
          random_tensor("d.empty", DType::kI8, {0, 4}, 4),
          random_tensor("e.fp8", DType::kF8E4M3, {2, 2, 2}, 5),
          random_tensor("f.u8", DType::kU8, {9}, 6)};
}

void expect_same(const TensorView& view, const NamedTensor& t) {
  ASSERT_NE(view.info, nullptr);
  EXPECT_EQ(view.info->name, t.name);
  EXPECT_EQ(view.info->dtype, t.dtype);
  EXPECT_EQ(view.info->shape, t.shape);
  ASSERT_EQ(view.bytes.size(), t.data.size());
  EXPECT_TRUE(std::equal(view.bytes.begin(), view.bytes.end(), t.data.begin()));
}

TEST(Safetensors, RoundTripSingleFile) {
  TempDir dir;
  const auto tensors = sample_tensors();
  write_safetensors(dir.path() / "model.safetensors", tensors, {{"format", "pt"}});
  const SafetensorsFile file(dir.path() / "model.safetensors");
  ASSERT_EQ(file.tensors().size(), tensors.size());
  EXPECT_TRUE(std::is_sorted(file.tensors().begin(), file.tensors().end(),
                             [](const auto& a, const auto& b) { return a.name < b.name; }));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (const auto& t : tensors) expect_same(file.tensor(t.name), t);
  EXPECT_EQ(file.find("nope"), nullptr);
  EXPECT_THAT(error_of([&] { file.tensor("nope"); }), HasSubstr("no tensor 'nope'"));

  const Checkpoint checkpoint(dir.path());
  EXPECT_EQ(checkpoint.num_shards(), 1);
  EXPECT_EQ(checkpoint.tensors().size(), tensors.size());
  uint64_t total = 0;
  for (const auto& t : tensors) {
    expect_same(checkpoint.tensor(t.name), t);
    total += t.data.size();
  }
  EXPECT_EQ(checkpoint.total_bytes(), total);
}

TEST(Safetensors, RoundTripSharded) {
  TempDir dir;
  const auto all = sample_tensors();
  const std::vector<std::vector<NamedTensor>> shards = {
      {all[0], all[1]}, {all[2], all[3]}, {all[4], all[5]}};
  write_sharded_checkpoint(dir.path(), shards);
  const Checkpoint checkpoint(dir.path());
  EXPECT_EQ(checkpoint.num_shards(), 3);
  ASSERT_EQ(checkpoint.tensors().size(), all.size());
  for (const auto& t : all) expect_same(checkpoint.tensor(t.name), t);
  EXPECT_EQ(checkpoint.find("e.fp8")->shard, checkpoint.find("f.u8")->shard);
  EXPECT_NE(checkpoint.find("a.weight")->shard, checkpoint.find("f.u8")->shard);
  EXPECT_THAT(error_of([&] { checkpoint.tensor("zzz"); }),
              HasSubstr("the checkpoint has no tensor 'zzz'"));
}

TEST(Safetensors, TruncatedFile) {
  const std::vector<std::byte> five(5, std::byte{1});
  EXPECT_THAT(header_error(five),
              AllOf(HasSubstr("weights.safetensors: file is 5 bytes"),
                    HasSubstr("shorter than the 8-byte safetensors header length")));
  TempDir dir;
  std::ofstream(dir.path() / "model.safetensors") << "abc";
  EXPECT_THAT(error_of([&] { Checkpoint c(dir.path()); }),
              HasSubstr("model.safetensors: file is 3 bytes"));
}

TEST(Safetensors, HeaderLengthPastEnd) {
  EXPECT_THAT(header_error(file_bytes("{}", 0, 1000)),
              HasSubstr("weights.safetensors: header length 1000 runs past the end of the file "
                        "(2 bytes after the length)"));
}

TEST(Safetensors, HeaderLengthOverLimit) {
  TempDir dir;
  write_raw_safetensors(dir.path() / "model.safetensors", 200'000'000, "{}", {});
  EXPECT_THAT(error_of([&] { Checkpoint c(dir.path()); }),
              AllOf(HasSubstr("model.safetensors: header length 200000000 exceeds the "
                              "100000000 byte limit")));
}

TEST(Safetensors, BadJson) {
  EXPECT_THAT(header_error(file_bytes("{\"a\": [1, 2")),
              HasSubstr("weights.safetensors: the safetensors header is not valid JSON"));
  EXPECT_THAT(header_error(file_bytes("[1, 2]")),
              HasSubstr("weights.safetensors: the safetensors header must be a JSON object"));
  EXPECT_THAT(header_error(file_bytes(R"({"x": 3})")),
              HasSubstr("weights.safetensors: tensor 'x': entry must be an object, got 3"));
  EXPECT_THAT(
      header_error(file_bytes(R"({"__metadata__": {"format": 1}})")),
      HasSubstr("weights.safetensors: __metadata__ entry 'format' must be a string, got 1"));
}

TEST(Safetensors, UnknownDtype) {
  for (const std::string dtype : {"F64", "XYZ", "f32", "I64"}) {
    const std::string header =
        R"({"w": {"dtype": ")" + dtype + R"(", "shape": [1], "data_offsets": [0, 8]}})";
    EXPECT_THAT(header_error(file_bytes(header, 8)),
                HasSubstr("weights.safetensors: tensor 'w' has dtype '" + dtype +
                          "', which is not supported (supported: F32, F16, BF16, I8, U8, "
                          "F8_E4M3)"));
  }
}

TEST(Safetensors, SpanMismatch) {
  const std::string header =
      R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})";
  EXPECT_THAT(header_error(file_bytes(header, 24)),
              HasSubstr("weights.safetensors: tensor 'w': shape [2,3] of F32 needs 24 bytes but "
                        "data_offsets [0, 20] span 20"));
  const std::string huge =
      R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})";
  EXPECT_THAT(header_error(file_bytes(huge)), HasSubstr("needs more than 2^64 bytes"));
}

TEST(Safetensors, BadShapeAndOffsets) {
  EXPECT_THAT(header_error(file_bytes(
                  R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4)),
              HasSubstr("tensor 'w': 'shape' must be an array of non-negative integers, got [-1]"));
  EXPECT_THAT(header_error(file_bytes(R"({"w": {"dtype": "F32", "shape": [1]}})", 4)),
              HasSubstr("tensor 'w': 'data_offsets' must be [begin, end]"));
  EXPECT_THAT(header_error(file_bytes(
                  R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4)),
              HasSubstr("tensor 'w': data_offsets [4, 0] has begin > end"));
  EXPECT_THAT(header_error(file_bytes(
                  R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8)),
              HasSubstr("tensor 'w': 'data_offsets' must be [begin, end]"));
}

TEST(Safetensors, Overlap) {
  const std::string header =
      R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
      R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},)"
      R"( "z": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})";
  EXPECT_THAT(header_error(file_bytes(header, 24)),
              HasSubstr("weights.safetensors: tensors 'a' [0, 16] and 'b' [8, 24] overlap"));
}

TEST(Safetensors, DuplicateNameInOneHeader) {
  const std::string header =
      R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
      R"( "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})";
  EXPECT_THAT(header_error(file_bytes(header, 2)),
              HasSubstr("weights.safetensors: tensor 'a' appears twice in the header"));
}

TEST(Safetensors, OffsetsOutsideDataArea) {
  const std::string header =
      R"({"w": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}})";
  EXPECT_THAT(header_error(file_bytes(header, 16)),
              HasSubstr("weights.safetensors: tensor 'w': data_offsets [0, 64] lie outside the "
                        "data area (16 bytes)"));
}

TEST(Safetensors, MissingShard) {
  TempDir dir;
  const auto all = sample_tensors();
  write_sharded_checkpoint(dir.path(), {{all[0]}, {all[1]}});
  std::filesystem::remove(dir.path() / "model-00002-of-00002.safetensors");
  EXPECT_THAT(error_of([&] { Checkpoint c(dir.path()); }),
              AllOf(HasSubstr("model.safetensors.index.json: shard file "
                              "'model-00002-of-00002.safetensors' named by the index (for tensor "
                              "'a.weight') is missing")));
}

TEST(Safetensors, DuplicateNameAcrossShards) {
  TempDir dir;
  const auto all = sample_tensors();
  write_sharded_checkpoint(dir.path(), {{all[0], all[1]}, {all[2]}});
  // Shard 2 also holds a.weight, which the index places in shard 1.
  write_safetensors(dir.path() / "model-00002-of-00002.safetensors", {all[2], all[1]});
  EXPECT_THAT(error_of([&] { Checkpoint c(dir.path()); }),
              HasSubstr("tensor 'a.weight' appears in two shards: model-00001-of-00002.safetensors "
                        "and model-00002-of-00002.safetensors"));
}

TEST(Safetensors, IndexNamesTensorNotInShard) {
  TempDir dir;
  const auto all = sample_tensors();
  write_sharded_checkpoint(dir.path(), {{all[0]}, {all[1]}});
  write_safetensors(dir.path() / "model-00002-of-00002.safetensors", {all[2]});
  EXPECT_THAT(error_of([&] { Checkpoint c(dir.path()); }),
              HasSubstr("tensor 'a.weight' is listed in shard 'model-00002-of-00002.safetensors', "
                        "but that file does not hold it"));
}

TEST(Safetensors, BadIndex) {
  TempDir dir;
  std::ofstream(dir.path() / "model.safetensors.index.json") << "{\"weight_map\": [1]}";
  EXPECT_THAT(error_of([&] { Checkpoint c(dir.path()); }),
              HasSubstr("model.safetensors.index.json: must be an object with a 'weight_map'"));
  std::ofstream(dir.path() / "model.safetensors.index.json") << "{\"weight_map\": ";
  EXPECT_THAT(error_of([&] { Checkpoint c(dir.path()); }),
              HasSubstr("model.safetensors.index.json: not valid JSON"));
  std::ofstream(dir.path() / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "../escape.safetensors"}})";
  EXPECT_THAT(error_of([&] { Checkpoint c(dir.path()); }),
              HasSubstr("names '../escape.safetensors', which is not a plain file name"));
}

TEST(Safetensors, NoCheckpoint) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { Checkpoint c(dir.path()); }),
              HasSubstr("no model.safetensors or model.safetensors.index.json"));
}

}  // namespace
}  // namespace spindle
