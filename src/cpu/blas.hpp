#pragma once
// How heed calls BLAS on the CPU: heed threads over tasks and BLAS runs single-threaded
// inside each (the composed route and the layer's projections alike).

#include <algorithm>
#include <cstdint>

namespace heed::cpu {

// Sets OpenBLAS to one thread, once per process.
void use_single_threaded_blas();

// A BLAS dimension or leading dimension: at least 1 (BLAS rejects 0 leading dimensions).
inline int blas_int(std::int64_t value) { return static_cast<int>(std::max<std::int64_t>(value, 1)); }

}  // namespace heed::cpu
