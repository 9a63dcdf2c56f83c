#pragma once
// What this CPU can do, measured: the ceilings that benchmark figures are a fraction of.

namespace heed {

struct CpuCeilings {
  int threads = 1;                // heed's CPU threads (HEED_NUM_THREADS or all cores)
  const char* isa = "generic";    // the instruction set heed's fused kernels use
  double fma_gflops = 0;          // float32 FMA rate of all threads, 2 FLOPs per FMA
  double copy_gbytes = 0;         // memory copy on all threads, bytes read + written per second
  double amx_gflops = 0;          // bfloat16 rate on the AMX tiles of all threads; 0 without them
};

// Runs for about half a second: independent FMA chains in the kernels' instruction set on
// every thread, then a copy of 2 x 256 MiB split across the threads (best of 3); on a CPU
// whose kernels use the AMX tiles, independent tile products on every thread too.
CpuCeilings measure_cpu_ceilings();

}  // namespace heed
