#pragma once
// A minimal, strict JSON parser for the CLI tests: enough to prove that `heed plan --json`
// and `heed bench --json` print valid JSON and to read fields back.

#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace heed::test_json {

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  double number = 0.0;
  std::string text;
  std::vector<Value> items;              // Array
  std::map<std::string, Value> members;  // Object

  const Value* find(const std::string& key) const {
    const auto found = members.find(key);
    return found == members.end() ? nullptr : &found->second;
  }
};

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  // Throws std::runtime_error on anything that is not exactly one JSON value.
  Value parse_document() {
    Value value = parse_value();
    skip_space();
    if (pos_ != text_.size()) fail("trailing text");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("json: " + what + " at offset " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < text_.size() &&
           std::string_view(" \t\r\n").find(text_[pos_]) != std::string_view::npos)
      ++pos_;
  }
  bool consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  Value parse_value() {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end");
    Value value;
    const char c = text_[pos_];
    if (c == '{') return parse_object();
    if (c == '[') return parse_array();
    if (c == '"') {
      value.kind = Value::Kind::String;
      value.text = parse_string();
    } else if (consume("true")) {
      value.kind = Value::Kind::Bool;
      value.boolean = true;
    } else if (consume("false")) {
      value.kind = Value::Kind::Bool;
    } else if (consume("null")) {
      value.kind = Value::Kind::Null;
    } else {
      value.kind = Value::Kind::Number;
      value.number = parse_number();
    }
    return value;
  }
  double parse_number() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() &&
           std::string_view("+-0123456789.eE").find(text_[pos_]) != std::string_view::npos)
      ++pos_;
    const std::string number(text_.substr(start, pos_ - start));
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size())
      fail("bad number '" + number + "'");
    return value;
  }
  std::string parse_string() {
    ++pos_;  // opening quote
    std::string result;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c == '\\') {
        if (pos_ >= text_.size()) fail("unterminated escape");
        c = text_[pos_++];
        if (c == 'u') {
          if (pos_ + 4 > text_.size()) fail("short \\u escape");
          result += static_cast<char>(
              std::strtol(std::string(text_.substr(pos_, 4)).c_str(), nullptr, 16));
          pos_ += 4;
          continue;
        }
        if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) fail("bad escape");
        c = c == 'n'   ? '\n'
            : c == 't' ? '\t'
            : c == 'r' ? '\r'
            : c == 'b' ? '\b'
            : c == 'f' ? '\f'
                       : c;
      }
      result += c;
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    ++pos_;
    return result;
  }
  Value parse_array() {
    Value value;
    value.kind = Value::Kind::Array;
    ++pos_;
    skip_space();
    if (consume("]")) return value;
    while (true) {
      value.items.push_back(parse_value());
      skip_space();
      if (consume("]")) return value;
      if (!consume(",")) fail("expected ',' or ']'");
    }
  }
  Value parse_object() {
    Value value;
    value.kind = Value::Kind::Object;
    ++pos_;
    skip_space();
    if (consume("}")) return value;
    while (true) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a key");
      std::string key = parse_string();
      skip_space();
      if (!consume(":")) fail("expected ':'");
      value.members[key] = parse_value();
      skip_space();
      if (consume("}")) return value;
      if (!consume(",")) fail("expected ',' or '}'");
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

inline Value parse(std::string_view text) { return Parser(text).parse_document(); }

}  // namespace heed::test_json
