#include "cpu/attention_cpu.hpp"

#include <variant>

#include "cpu/kernels.hpp"

namespace heed::cpu {

void run_attention(const call::Call& call, const plan::CpuRoute& route, std::byte* scratch) {
  std::visit(
      [&](const auto& kernel) {
        using Kernel = std::decay_t<decltype(kernel)>;
        if constexpr (std::is_same_v<Kernel, route::Vector>) {
          run_vector(call, route, scratch);
        } else if constexpr (std::is_same_v<Kernel, route::Tiled>) {
          run_tiled(call, route, scratch);
        } else {
          run_composed(call, route, scratch);
        }
      },
      route.plan.kernel);
}

}  // namespace heed::cpu
