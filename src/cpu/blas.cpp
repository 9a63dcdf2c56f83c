#include "cpu/blas.hpp"

#include <cblas.h>

#include <mutex>

namespace heed::cpu {

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace heed::cpu
