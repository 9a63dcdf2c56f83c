#pragma once
// The CPU routes. Each runs one plan over the caller's tensors with the scratch the plan
// laid out, and records its dispatches with the profiler.

#include <cstddef>
#include <cstdint>

#include "cpu/params.hpp"
#include "plan/cpu_plan.hpp"

namespace heed::cpu {

// Fused routes, dispatched to the instruction set in cpu_info().isa.
void run_vector(const Call& params, const plan::CpuRoute& route, std::byte* scratch);
void run_tiled(const Call& params, const plan::CpuRoute& route, std::byte* scratch);
// FMA chains in the dispatched instruction set; returns the FLOPs done (ceilings).
double run_fma_chains(std::int64_t steps);
// out[i] = exp(x[i]) by the dispatched instruction set's softmax exp (its accuracy is tested).
void run_softmax_exp(const float* x, std::int64_t count, float* out);
// out[i] = dtype(x[i]) (float16 or bfloat16 bits) as the dispatched instruction set's kernels
// narrow a contiguous output row (tested against the scalar conversions).
void run_narrow_row(DType dtype, const float* x, std::int64_t count, std::uint16_t* out);
// out[i] = 2^x[i] by the bfloat16 tiled route's exp for weights kept in `parts` bfloat16 parts
// (1 for bfloat16, 2 for float16, 3 for float32 inputs); false where that route is not compiled
// for this CPU (cpu_info().isa below Avx512Bf16).
bool run_weights_exp2(int parts, const float* x, std::int64_t count, float* out);
// bfloat16 products on the AMX tiles, `steps` × 4 of them; returns the FLOPs done (0 where
// cpu_info().isa is not Amx).
double run_amx_chains(std::int64_t steps);
// bfloat16 dot products (vdpbf16ps), `steps` × 24 of them; the FLOPs done (0 below Avx512Bf16).
double run_dot_bf16_chains(std::int64_t steps);
// BLAS composition (Composed and ComposedBlocks).
void run_composed(const Call& params, const plan::CpuRoute& route, std::byte* scratch);

}  // namespace heed::cpu
