#pragma once
// What this CPU can do, measured: the ceilings that benchmark figures are a fraction of.

namespace heed {

struct CpuCeilings {
  int threads = 1;                // heed's CPU threads (HEED_NUM_THREADS or all cores)
  const char* isa = "generic";    // the instruction set heed's fused kernels use
  double fma_gflops = 0;          // float32 FMA rate of all threads, 2 FLOPs per FMA
  double copy_gbytes = 0;         // memory copy on all threads, bytes read + written per second
  double read_gbytes = 0;         // memory read on all threads (a stream, as decode's), bytes per second
  double amx_gflops = 0;          // bfloat16 rate on the AMX tiles of all threads; 0 without them
  double dot_bf16_gflops = 0;     // bfloat16 AVX512-BF16 dot-product rate; 0 without it
};

// Runs for about half a second: independent FMA chains in the kernels' instruction set on
// every thread, then a copy of 2 x 256 MiB split across the threads and a read of the copy's
// source (best of 3 each); where the kernels use them, independent AVX512-BF16 dot products
// and AMX tile products too.
CpuCeilings measure_cpu_ceilings();

}  // namespace heed
