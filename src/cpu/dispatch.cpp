// The one dispatch point from the fused routes to their instruction-set builds.

#include "core/cpu_info.hpp"
#include "cpu/kernels.hpp"

namespace heed::cpu {

#define HEED_DECLARE_ISA(isa)                                                                      \
  namespace isa {                                                                                  \
  void run_tiled_kernel(const Call&, const plan::CpuRoute&, std::byte*);                \
  void run_vector_kernel(const Call&, const plan::CpuRoute&, std::byte*);               \
  double fma_chains(std::int64_t steps);                                                           \
  void softmax_exp(const float*, std::int64_t, float*);                                            \
  void narrow_row(DType, const float*, std::int64_t, std::uint16_t*);                              \
  }
HEED_DECLARE_ISA(generic)
HEED_DECLARE_ISA(avx2)
HEED_DECLARE_ISA(avx512)
#undef HEED_DECLARE_ISA
namespace amx {
void run_tiled_kernel(const Call&, const plan::CpuRoute&, std::byte*);
double matrix_chains(std::int64_t steps);
double dot_chains(std::int64_t steps);
void weights_exp2(int parts, const float* x, std::int64_t count, float* out);
}

void run_tiled(const Call& params, const plan::CpuRoute& route, std::byte* scratch) {
  if (route.amx.on) return amx::run_tiled_kernel(params, route, scratch);
  switch (cpu_info().isa) {
    case CpuIsa::Amx:
    case CpuIsa::Avx512Bf16:
    case CpuIsa::Avx512: return avx512::run_tiled_kernel(params, route, scratch);
    case CpuIsa::Avx2: return avx2::run_tiled_kernel(params, route, scratch);
    case CpuIsa::Generic: return generic::run_tiled_kernel(params, route, scratch);
  }
}

void run_vector(const Call& params, const plan::CpuRoute& route, std::byte* scratch) {
  switch (cpu_info().isa) {
    case CpuIsa::Amx:
    case CpuIsa::Avx512Bf16:
    case CpuIsa::Avx512: return avx512::run_vector_kernel(params, route, scratch);
    case CpuIsa::Avx2: return avx2::run_vector_kernel(params, route, scratch);
    case CpuIsa::Generic: return generic::run_vector_kernel(params, route, scratch);
  }
}

double run_fma_chains(std::int64_t steps) {
  switch (cpu_info().isa) {
    case CpuIsa::Amx:
    case CpuIsa::Avx512Bf16:
    case CpuIsa::Avx512: return avx512::fma_chains(steps);
    case CpuIsa::Avx2: return avx2::fma_chains(steps);
    case CpuIsa::Generic: return generic::fma_chains(steps);
  }
  return 0;
}

void run_softmax_exp(const float* x, std::int64_t count, float* out) {
  switch (cpu_info().isa) {
    case CpuIsa::Amx:
    case CpuIsa::Avx512Bf16:
    case CpuIsa::Avx512: return avx512::softmax_exp(x, count, out);
    case CpuIsa::Avx2: return avx2::softmax_exp(x, count, out);
    case CpuIsa::Generic: return generic::softmax_exp(x, count, out);
  }
}

void run_narrow_row(DType dtype, const float* x, std::int64_t count, std::uint16_t* out) {
  switch (cpu_info().isa) {
    case CpuIsa::Amx:
    case CpuIsa::Avx512Bf16:
    case CpuIsa::Avx512: return avx512::narrow_row(dtype, x, count, out);
    case CpuIsa::Avx2: return avx2::narrow_row(dtype, x, count, out);
    case CpuIsa::Generic: return generic::narrow_row(dtype, x, count, out);
  }
}

bool run_weights_exp2(int parts, const float* x, std::int64_t count, float* out) {
  if (cpu_info().isa < CpuIsa::Avx512Bf16) return false;
  amx::weights_exp2(parts, x, count, out);
  return true;
}

double run_amx_chains(std::int64_t steps) {
  return cpu_info().isa == CpuIsa::Amx ? amx::matrix_chains(steps) : 0.0;
}

double run_dot_bf16_chains(std::int64_t steps) {
  return cpu_info().isa >= CpuIsa::Avx512Bf16 ? amx::dot_chains(steps) : 0.0;
}

}  // namespace heed::cpu
