// The fused CPU routes compiled for the avx2 instruction set.
#define HEED_ISA avx2
#include "cpu/kernels_impl.hpp"
