#pragma once
// The instruction set a kernel translation unit is compiled for. Each ISA translation unit
// defines HEED_ISA (generic, avx2, avx512) before its includes; the shared inline helpers
// then live in heed::cpu::<isa>, so no out-of-line copy compiled for one ISA can be picked
// by the linker for another.

#ifndef HEED_ISA
#define HEED_ISA generic
#endif
