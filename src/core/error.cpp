#include "heed/error.hpp"

namespace heed {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return "InvalidArgument";
    case ErrorKind::Unsupported: return "Unsupported";
    case ErrorKind::OutOfMemory: return "OutOfMemory";
    case ErrorKind::Internal: return "Internal";
  }
  return "Unknown";
}

}  // namespace heed
