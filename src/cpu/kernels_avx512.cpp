// The fused CPU routes compiled for the avx512 instruction set.
#define HEED_ISA avx512
#include "cpu/kernels_impl.hpp"
