// The .npy format: magic "\x93NUMPY", major and minor version bytes, a little-endian header
// length (2 bytes in 1.0, 4 bytes in 2.0 and 3.0), then a Python dict literal
// {'descr': ..., 'fortran_order': ..., 'shape': (...)} padded with spaces to a multiple of 64
// and ended by '\n', then the elements.

#include "npy.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>

#include "heed/dtype.hpp"
#include "heed/error.hpp"

namespace heed::npy {

namespace {

constexpr std::array<unsigned char, 6> kMagic = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t kHeaderAlignment = 64;
constexpr std::size_t kVersion1MaxHeader = std::numeric_limits<std::uint16_t>::max();

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, "[heed::npy] " + source + ": " + message);
}

std::string join_dims(const std::vector<std::int64_t>& shape, const char* open, const char* close,
                      bool python_tuple) {
  std::string text = open;
  for (std::size_t axis = 0; axis < shape.size(); ++axis) {
    if (axis > 0) text += ", ";
    text += std::to_string(shape[axis]);
  }
  if (python_tuple && shape.size() == 1) text += ",";
  return text + close;
}

// The header's dict, parsed as the small subset of Python literals NumPy writes.
struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<std::int64_t>> shape;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  Header parse() {
    Header header;
    expect('{');
    skip_space();
    while (peek() != '}') {
      const std::string key = parse_string();
      expect(':');
      parse_entry(key, header);
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != '}') {
        error("expected ',' or '}'");
      }
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) error("unexpected text after the dict");
    if (!header.descr || !header.fortran_order || !header.shape) {
      fail(source_, "header lacks 'descr', 'fortran_order' or 'shape': " + std::string(text_));
    }
    return header;
  }

 private:
  void parse_entry(const std::string& key, Header& header) {
    skip_space();
    if (key == "descr") {
      if (peek() == '[') fail(source_, "structured arrays are not supported");
      header.descr = parse_string();
    } else if (key == "fortran_order") {
      header.fortran_order = parse_bool();
    } else if (key == "shape") {
      header.shape = parse_shape();
    } else {
      error("unexpected key '" + key + "'");
    }
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  void expect(char wanted) {
    skip_space();
    if (peek() != wanted) error(std::string("expected '") + wanted + "'");
    ++pos_;
  }

  [[noreturn]] void error(const std::string& what) const {
    fail(source_, "malformed header (" + what + " at offset " + std::to_string(pos_) +
                      "): " + std::string(text_));
  }

  std::string parse_string() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') error("expected a quoted string");
    const std::size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) error("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }

  bool parse_bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    error("expected True or False");
  }

  std::int64_t parse_dim() {
    skip_space();
    if (peek() < '0' || peek() > '9') error("expected a non-negative integer");
    std::int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
        error("dimension overflows int64");
      }
      value = value * 10 + digit;
      ++pos_;
    }
    if (peek() == 'L') ++pos_;  // Python 2 long literal
    return value;
  }

  std::vector<std::int64_t> parse_shape() {
    std::vector<std::int64_t> shape;
    expect('(');
    skip_space();
    while (peek() != ')') {
      shape.push_back(parse_dim());
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != ')') {
        error("expected ',' or ')' in shape");
      }
    }
    ++pos_;
    return shape;
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t pos_ = 0;
};

ElementType element_type_of(const std::string& descr, const std::string& source) {
  if (descr == "<f4" || descr == "=f4") return ElementType::Float32;
  if (descr == "<f2" || descr == "=f2") return ElementType::Float16;
  if (descr == "|b1" || descr == "<b1" || descr == "=b1" || descr == ">b1")
    return ElementType::Bool;
  if (descr == "|u1" || descr == "<u1" || descr == "=u1" || descr == ">u1")
    return ElementType::UInt8;
  if (!descr.empty() && descr[0] == '>') {
    fail(source, "big-endian arrays are not supported (descr '" + descr +
                     "'); convert with a.astype(a.dtype.newbyteorder('<'))");
  }
  if (descr.find('O') != std::string::npos) {
    fail(source, "object arrays are not supported (descr '" + descr + "')");
  }
  fail(source, "unsupported dtype '" + descr + "' (supported: <f4, <f2, |b1, |u1)");
}

std::uint32_t read_little_endian(const std::byte* bytes, std::size_t width) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < width; ++i) {
    value |= static_cast<std::uint32_t>(std::to_integer<unsigned>(bytes[i])) << (8 * i);
  }
  return value;
}

// Copies elements between C order and Fortran order of `shape`.
std::vector<std::byte> reorder(std::span<const std::byte> data,
                               const std::vector<std::int64_t>& shape, std::size_t item,
                               bool fortran_to_c) {
  std::vector<std::byte> result(data.size());
  const std::size_t rank = shape.size();
  std::vector<std::int64_t> fortran_strides(rank, 1);
  for (std::size_t axis = 1; axis < rank; ++axis) {
    fortran_strides[axis] = fortran_strides[axis - 1] * shape[axis - 1];
  }
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t fortran_offset = 0;
  const std::size_t count = item == 0 ? 0 : data.size() / item;
  for (std::size_t c_offset = 0; c_offset < count; ++c_offset) {
    const std::size_t from = fortran_to_c ? static_cast<std::size_t>(fortran_offset) : c_offset;
    const std::size_t to = fortran_to_c ? c_offset : static_cast<std::size_t>(fortran_offset);
    std::memcpy(result.data() + to * item, data.data() + from * item, item);
    for (std::size_t axis = rank; axis-- > 0;) {  // odometer, last axis fastest
      fortran_offset += fortran_strides[axis];
      if (++index[axis] < shape[axis]) break;
      fortran_offset -= fortran_strides[axis] * shape[axis];
      index[axis] = 0;
    }
  }
  return result;
}

std::int64_t checked_numel(const std::vector<std::int64_t>& shape, const std::string& source) {
  std::int64_t numel = 1;
  for (const std::int64_t dim : shape) {
    if (dim < 0) fail(source, "negative dimension in shape " + join_dims(shape, "[", "]", false));
    if (dim != 0 && numel > std::numeric_limits<std::int64_t>::max() / dim) {
      fail(source, "shape " + join_dims(shape, "[", "]", false) + " overflows int64");
    }
    numel *= dim;
  }
  return numel;
}

}  // namespace

std::size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::Float32:
      return 4;
    case ElementType::Float16:
      return 2;
    case ElementType::Bool:
    case ElementType::UInt8:
      return 1;
  }
  return 0;
}

const char* descr_of(ElementType type) {
  switch (type) {
    case ElementType::Float32:
      return "<f4";
    case ElementType::Float16:
      return "<f2";
    case ElementType::Bool:
      return "|b1";
    case ElementType::UInt8:
      return "|u1";
  }
  return "?";
}

const char* name_of(ElementType type) {
  switch (type) {
    case ElementType::Float32:
      return "float32";
    case ElementType::Float16:
      return "float16";
    case ElementType::Bool:
      return "bool";
    case ElementType::UInt8:
      return "uint8";
  }
  return "?";
}

std::int64_t Array::numel() const { return checked_numel(shape, "array"); }

std::string Array::shape_string() const { return join_dims(shape, "[", "]", false); }

Array parse(std::span<const std::byte> bytes, const std::string& source) {
  constexpr std::size_t kPrefix = kMagic.size() + 2;  // magic, major, minor
  if (bytes.size() < kPrefix || std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    fail(source, "not a .npy file (missing the \\x93NUMPY magic; " + std::to_string(bytes.size()) +
                     " bytes)");
  }
  const int major = std::to_integer<int>(bytes[6]);
  if (major < 1 || major > 3) {
    fail(source, "unsupported .npy format version " + std::to_string(major) + "." +
                     std::to_string(std::to_integer<int>(bytes[7])) +
                     " (supported: 1.0, 2.0, 3.0)");
  }
  const std::size_t length_width = major == 1 ? 2 : 4;
  if (bytes.size() < kPrefix + length_width) fail(source, "truncated in the header length");
  const std::size_t header_len = read_little_endian(bytes.data() + kPrefix, length_width);
  const std::size_t data_start = kPrefix + length_width + header_len;
  if (bytes.size() < data_start) {
    fail(source, "truncated header (needs " + std::to_string(data_start) + " bytes, file has " +
                     std::to_string(bytes.size()) + ")");
  }
  const std::string_view header_text(
      reinterpret_cast<const char*>(bytes.data() + kPrefix + length_width), header_len);
  const Header header = HeaderParser(header_text, source).parse();

  Array array;
  array.type = element_type_of(*header.descr, source);
  array.shape = *header.shape;
  const std::int64_t numel = checked_numel(array.shape, source);
  const std::size_t item = element_size(array.type);
  const std::size_t available = bytes.size() - data_start;
  if (static_cast<std::uint64_t>(numel) > available / item) {
    fail(source, "truncated data: shape " + array.shape_string() + " of " + name_of(array.type) +
                     " needs " + std::to_string(static_cast<std::uint64_t>(numel) * item) +
                     " bytes, file has " + std::to_string(available));
  }
  const std::size_t data_bytes = static_cast<std::size_t>(numel) * item;
  if (available != data_bytes) {
    fail(source, "has " + std::to_string(available - data_bytes) +
                     " bytes after the data of shape " + array.shape_string());
  }
  const auto data = bytes.subspan(data_start, data_bytes);
  if (*header.fortran_order && array.shape.size() > 1) {
    array.data = reorder(data, array.shape, item, /*fortran_to_c=*/true);
  } else {
    array.data.assign(data.begin(), data.end());
  }
  return array;
}

Array read(const std::string& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             &std::fclose);
  if (!file) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<std::byte> bytes;
  std::array<std::byte, 1 << 16> chunk;
  std::size_t got = 0;
  while ((got = std::fread(chunk.data(), 1, chunk.size(), file.get())) > 0) {
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(got));
  }
  if (std::ferror(file.get())) fail(path, std::string("cannot read: ") + std::strerror(errno));
  return parse(bytes, path);
}

std::vector<std::byte> serialize(const Array& array, const WriteOptions& options) {
  const std::int64_t numel = checked_numel(array.shape, "serialize");
  const std::size_t item = element_size(array.type);
  if (array.data.size() != static_cast<std::size_t>(numel) * item) {
    fail("serialize", "shape " + array.shape_string() + " of " + name_of(array.type) + " needs " +
                          std::to_string(static_cast<std::size_t>(numel) * item) +
                          " bytes, data has " + std::to_string(array.data.size()));
  }
  if (options.major_version < 1 || options.major_version > 3) {
    fail("serialize",
         "format version " + std::to_string(options.major_version) + " is not 1, 2 or 3");
  }
  std::string dict = std::string("{'descr': '") + descr_of(array.type) +
                     "', 'fortran_order': " + (options.fortran_order ? "True" : "False") +
                     ", 'shape': " + join_dims(array.shape, "(", ")", true) + ", }";
  int major = options.major_version;
  auto padded_length = [&](int version) {
    const std::size_t preamble = kMagic.size() + 2 + (version == 1 ? 2 : 4);
    const std::size_t unpadded = preamble + dict.size() + 1;  // + '\n'
    return (unpadded + kHeaderAlignment - 1) / kHeaderAlignment * kHeaderAlignment - preamble;
  };
  if (major == 1 && padded_length(1) > kVersion1MaxHeader) major = 2;
  const std::size_t header_len = padded_length(major);
  dict.resize(header_len - 1, ' ');
  dict += '\n';

  std::vector<std::byte> bytes;
  for (const unsigned char c : kMagic) bytes.push_back(std::byte{c});
  bytes.push_back(static_cast<std::byte>(major));
  bytes.push_back(std::byte{0});
  const std::size_t length_width = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < length_width; ++i) {
    bytes.push_back(static_cast<std::byte>((header_len >> (8 * i)) & 0xFF));
  }
  for (const char c : dict) bytes.push_back(static_cast<std::byte>(c));
  if (options.fortran_order && array.shape.size() > 1) {
    const auto reordered = reorder(array.data, array.shape, item, /*fortran_to_c=*/false);
    bytes.insert(bytes.end(), reordered.begin(), reordered.end());
  } else {
    bytes.insert(bytes.end(), array.data.begin(), array.data.end());
  }
  return bytes;
}

void write(const std::string& path, const Array& array, const WriteOptions& options) {
  const std::vector<std::byte> bytes = serialize(array, options);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) fail(path, std::string("cannot create: ") + std::strerror(errno));
  const std::size_t written = std::fwrite(bytes.data(), 1, bytes.size(), file);
  const bool closed = std::fclose(file) == 0;
  if (written != bytes.size() || !closed) {
    fail(path, "cannot write " + std::to_string(bytes.size()) + " bytes: " + std::strerror(errno));
  }
}

std::vector<float> to_float32(const Array& array) {
  const std::size_t count = static_cast<std::size_t>(array.numel());
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::byte* element = array.data.data() + i * element_size(array.type);
    switch (array.type) {
      case ElementType::Float32:
        std::memcpy(&values[i], element, sizeof(float));
        break;
      case ElementType::Float16: {
        std::uint16_t bits = 0;
        std::memcpy(&bits, element, sizeof(bits));
        values[i] = half_bits_to_float(bits);
        break;
      }
      case ElementType::Bool:
      case ElementType::UInt8:
        values[i] = static_cast<float>(std::to_integer<unsigned>(*element));
        break;
    }
  }
  return values;
}

namespace {
template <typename Element>
Array array_of(ElementType type, std::vector<std::int64_t> shape, std::span<const Element> values) {
  Array array;
  array.type = type;
  array.shape = std::move(shape);
  if (static_cast<std::size_t>(checked_numel(array.shape, "array")) != values.size()) {
    fail("array", "shape " + array.shape_string() + " does not hold " +
                      std::to_string(values.size()) + " values");
  }
  array.data.resize(values.size() * sizeof(Element));
  if (!values.empty()) std::memcpy(array.data.data(), values.data(), array.data.size());
  return array;
}
}  // namespace

Array from_float32(std::vector<std::int64_t> shape, std::span<const float> values) {
  return array_of(ElementType::Float32, std::move(shape), values);
}

Array from_float16_bits(std::vector<std::int64_t> shape, std::span<const std::uint16_t> bits) {
  return array_of(ElementType::Float16, std::move(shape), bits);
}

Array from_bools(std::vector<std::int64_t> shape, std::span<const std::uint8_t> values) {
  Array array = array_of(ElementType::Bool, std::move(shape), values);
  for (std::byte& element : array.data)
    element = element != std::byte{0} ? std::byte{1} : std::byte{0};
  return array;
}

}  // namespace heed::npy
