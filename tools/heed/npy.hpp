#pragma once
// A small .npy reader and writer (NumPy format versions 1.0, 2.0 and 3.0).
// Reads little-endian float32 ('<f4'), float16 ('<f2'), bool ('|b1') and uint8 ('|u1') arrays
// of any rank, in C or Fortran order (converted to C order). Rejects big-endian, object and
// structured arrays and truncated files with a heed::Error naming the file and the values.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace heed::npy {

enum class ElementType { Float32, Float16, Bool, UInt8 };

std::size_t element_size(ElementType type);
const char* descr_of(ElementType type);  // "<f4", "<f2", "|b1", "|u1"
const char* name_of(ElementType type);   // "float32", "float16", "bool", "uint8"

// An array in C order, little-endian elements.
struct Array {
  ElementType type = ElementType::Float32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;

  std::int64_t numel() const;
  std::string shape_string() const;  // "[2, 3]"
};

struct WriteOptions {
  int major_version = 1;       // 1, 2 or 3; 1 is widened to 2 when the header needs it
  bool fortran_order = false;  // store the elements in Fortran order
};

// Parses the bytes of a .npy file; `source` names it in errors.
Array parse(std::span<const std::byte> bytes, const std::string& source);
Array read(const std::string& path);

std::vector<std::byte> serialize(const Array& array, const WriteOptions& options = {});
// Writes exactly `path` (no temporary file; see the CLI for atomic replacement).
void write(const std::string& path, const Array& array, const WriteOptions& options = {});

// Conversions to and from float32 (float16 through heed's round-to-nearest-even).
std::vector<float> to_float32(const Array& array);
Array from_float32(std::vector<std::int64_t> shape, std::span<const float> values);
Array from_float16_bits(std::vector<std::int64_t> shape, std::span<const std::uint16_t> bits);
Array from_bools(std::vector<std::int64_t> shape, std::span<const std::uint8_t> values);

}  // namespace heed::npy
