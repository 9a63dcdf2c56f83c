#pragma once
// heed's error type: every failure carries a kind and a message that starts with the
// operation, e.g. "[heed::attention] Hq (32) must be a multiple of Hkv (6)".

#include <stdexcept>
#include <string>

namespace heed {

enum class ErrorKind { InvalidArgument, Unsupported, OutOfMemory, Internal };

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace heed
