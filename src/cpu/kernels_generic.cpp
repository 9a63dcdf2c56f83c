// The fused CPU routes compiled for the generic instruction set.
#define HEED_ISA generic
#include "cpu/kernels_impl.hpp"
