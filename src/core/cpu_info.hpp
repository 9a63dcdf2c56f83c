#pragma once
// Immutable properties of this machine's CPU, read once per process.

#include <cstddef>

namespace heed {

// Instruction sets the fused CPU kernels are built for, best last. Avx512Bf16 is AVX-512
// with the bfloat16 dot product (vdpbf16ps): the bfloat16 tiled kernel multiplies with it.
// Amx adds the AMX tiles with bfloat16 (the OS granted their state): the bfloat16 and
// float16 tiled kernel runs its matrix work on the tiles. Everything else runs the AVX-512
// kernels on both.
enum class CpuIsa { Generic, Avx2, Avx512, Avx512Bf16, Amx };
const char* to_string(CpuIsa isa);

struct CpuInfo {
  // The best the CPU runs, lowered by HEED_CPU_ISA=generic|avx2|avx512|avx512bf16|amx when set.
  CpuIsa isa = CpuIsa::Generic;
  int threads = 1;              // HEED_NUM_THREADS, else the cores this process may run on
  std::size_t l1d_bytes = 0;    // per core
  std::size_t l2_bytes = 0;     // per core
};

const CpuInfo& cpu_info();

}  // namespace heed
