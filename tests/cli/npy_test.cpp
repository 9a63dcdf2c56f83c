// The .npy reader and writer of the heed tool.

#include "npy.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "heed/error.hpp"

namespace heed::npy {
namespace {

std::vector<std::byte> to_bytes(const std::string& text) {
  std::vector<std::byte> bytes(text.size());
  std::memcpy(bytes.data(), text.data(), text.size());
  return bytes;
}

// A .npy file with exactly this header dict (padded as NumPy pads) and these data bytes.
std::vector<std::byte> raw_npy(std::string dict, const std::vector<std::byte>& data,
                               int major = 1) {
  const std::size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string head = "\x93NUMPY";
  head += static_cast<char>(major);
  head += '\0';
  const std::size_t length = dict.size();
  for (std::size_t i = 0; i < (major == 1 ? 2u : 4u); ++i)
    head += static_cast<char>((length >> (8 * i)) & 0xFF);
  std::vector<std::byte> bytes = to_bytes(head + dict);
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::vector<std::byte> float_bytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Parsing must fail with a heed::Error whose message contains `expected`.
void expect_rejected(const std::vector<std::byte>& bytes, const std::string& expected) {
  try {
    parse(bytes, "test.npy");
    FAIL() << "parsed; expected an error containing '" << expected << "'";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument);
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("[heed::npy] test.npy: ", 0), 0u) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

std::vector<float> iota(std::size_t count) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return values;
}

TEST(Npy, Float32RoundTripIsExactAndAligned) {
  const std::vector<float> values = iota(24);
  const Array array = from_float32({2, 3, 4}, values);
  const std::vector<std::byte> bytes = serialize(array);
  EXPECT_EQ(std::to_integer<int>(bytes[6]), 1);
  const std::size_t header_len =
      std::to_integer<std::size_t>(bytes[8]) | std::to_integer<std::size_t>(bytes[9]) << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_EQ(bytes.size(), 10 + header_len + 24 * sizeof(float));
  const Array back = parse(bytes, "round.npy");
  EXPECT_EQ(back.type, ElementType::Float32);
  EXPECT_EQ(back.shape, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(to_float32(back), values);
}

TEST(Npy, Float16BoolAndUInt8RoundTrip) {
  const std::vector<std::uint16_t> bits = {0x3C00, 0xC000, 0x7C00, 0x0001};  // 1, -2, inf, tiny
  const Array half_back = parse(serialize(from_float16_bits({4}, bits)), "h.npy");
  EXPECT_EQ(half_back.type, ElementType::Float16);
  const std::vector<float> widened = to_float32(half_back);
  EXPECT_EQ(widened[0], 1.0f);
  EXPECT_EQ(widened[1], -2.0f);
  EXPECT_TRUE(std::isinf(widened[2]));

  const std::vector<std::uint8_t> flags = {1, 0, 7, 0, 1, 1};
  const Array bool_back = parse(serialize(from_bools({2, 3}, flags)), "b.npy");
  EXPECT_EQ(bool_back.type, ElementType::Bool);
  EXPECT_EQ(to_float32(bool_back), (std::vector<float>{1, 0, 1, 0, 1, 1}));  // 7 stored as true

  Array bytes_array;
  bytes_array.type = ElementType::UInt8;
  bytes_array.shape = {3};
  bytes_array.data = {std::byte{0}, std::byte{200}, std::byte{1}};
  const Array u8_back = parse(serialize(bytes_array), "u.npy");
  EXPECT_EQ(u8_back.type, ElementType::UInt8);
  EXPECT_EQ(u8_back.data, bytes_array.data);
}

TEST(Npy, ReadsVersion2And3Headers) {
  const std::vector<float> values = iota(6);
  for (const int version : {2, 3}) {
    WriteOptions options;
    options.major_version = version;
    const std::vector<std::byte> bytes = serialize(from_float32({3, 2}, values), options);
    EXPECT_EQ(std::to_integer<int>(bytes[6]), version);
    EXPECT_EQ(to_float32(parse(bytes, "v.npy")), values);
  }
  const auto handmade = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                                float_bytes({1.5f, -2.5f}), 2);
  EXPECT_EQ(to_float32(parse(handmade, "v2.npy")), (std::vector<float>{1.5f, -2.5f}));
}

TEST(Npy, WidensToVersion2WhenTheHeaderNeedsIt) {
  const std::vector<std::int64_t> shape(30000, 1);  // a header longer than 65535 bytes
  const std::vector<std::byte> bytes = serialize(from_float32(shape, std::vector<float>{4.0f}));
  EXPECT_EQ(std::to_integer<int>(bytes[6]), 2);
  const Array back = parse(bytes, "wide.npy");
  EXPECT_EQ(back.shape.size(), shape.size());
  EXPECT_EQ(to_float32(back), std::vector<float>{4.0f});
}

TEST(Npy, ConvertsFortranOrderToCOrder) {
  // [[0, 1, 2], [3, 4, 5]] stored column by column.
  const auto fortran = raw_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                               float_bytes({0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(to_float32(parse(fortran, "f.npy")), (std::vector<float>{0, 1, 2, 3, 4, 5}));

  const std::vector<float> values = iota(2 * 3 * 4 * 5);
  WriteOptions options;
  options.fortran_order = true;
  const std::vector<std::byte> bytes = serialize(from_float32({2, 3, 4, 5}, values), options);
  EXPECT_NE(std::memcmp(bytes.data() + bytes.size() - values.size() * 4, values.data(),
                        values.size() * 4),
            0);
  EXPECT_EQ(to_float32(parse(bytes, "f4.npy")), values);
}

TEST(Npy, AcceptsScalarsEmptyArraysAndPython2Longs) {
  const auto scalar =
      raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", float_bytes({7.0f}));
  const Array scalar_back = parse(scalar, "s.npy");
  EXPECT_TRUE(scalar_back.shape.empty());
  EXPECT_EQ(to_float32(scalar_back), std::vector<float>{7.0f});

  const Array empty_back = parse(serialize(from_float32({0, 5}, {})), "e.npy");
  EXPECT_EQ(empty_back.shape, (std::vector<std::int64_t>{0, 5}));
  EXPECT_TRUE(empty_back.data.empty());

  const auto python2 = raw_npy(
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1L, 2L)}", float_bytes({1, 2}));
  EXPECT_EQ(parse(python2, "p2.npy").shape, (std::vector<std::int64_t>{1, 2}));
}

TEST(Npy, RejectsTruncatedFiles) {
  const std::vector<std::byte> bytes = serialize(from_float32({4, 4}, iota(16)));
  expect_rejected(std::vector<std::byte>(bytes.begin(), bytes.end() - 1), "truncated data");
  expect_rejected(std::vector<std::byte>(bytes.begin(), bytes.begin() + 40), "truncated header");
  expect_rejected(std::vector<std::byte>(bytes.begin(), bytes.begin() + 9), "truncated");
  expect_rejected(std::vector<std::byte>(bytes.begin(), bytes.begin() + 3), "not a .npy file");
  expect_rejected({}, "not a .npy file");
}

TEST(Npy, RejectsBigEndianObjectAndUnsupportedTypes) {
  const auto data = float_bytes({1, 2});
  expect_rejected(raw_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", data),
                  "big-endian");
  expect_rejected(raw_npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", data),
                  "object arrays");
  expect_rejected(raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", data),
                  "unsupported dtype '<f8'");
  expect_rejected(
      raw_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", data),
      "structured");
}

TEST(Npy, RejectsMalformedHeadersAndSizes) {
  const auto data = float_bytes({1, 2});
  expect_rejected(raw_npy("{'descr': '<f4', 'shape': (2,), }", data), "lacks");
  expect_rejected(raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", data),
                  "malformed");
  expect_rejected(raw_npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", data),
                  "True or False");
  expect_rejected(raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data),
                  "malformed");
  expect_rejected(
      raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", data),
      "unexpected key");
  expect_rejected(raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", data),
                  "bytes after");
  expect_rejected(raw_npy("{'descr': '<f4', 'fortran_order': False, "
                          "'shape': (4294967296, 4294967296), }",
                          data),
                  "overflows");
  expect_rejected(raw_npy("{'descr': '<f4', 'fortran_order': False, "
                          "'shape': (99999999999999999999,), }",
                          data),
                  "overflows");
  std::vector<std::byte> future =
      raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data);
  future[6] = std::byte{4};
  expect_rejected(future, "version 4.0");
}

TEST(Npy, FileRoundTripAndMissingFile) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("heed_npy_test_" + std::to_string(::getpid()) + ".npy");
  const std::vector<float> values = iota(10);
  write(path.string(), from_float32({10}, values));
  EXPECT_EQ(to_float32(read(path.string())), values);
  std::filesystem::remove(path);
  try {
    read(path.string());
    FAIL() << "read a missing file";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("cannot open"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace heed::npy
