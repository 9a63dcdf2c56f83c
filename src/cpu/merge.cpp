// merge_states on the CPU: each row's two parts weighed by exp(lse_part - lse), in float32.

#include "cpu/merge.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu_info.hpp"
#include "cpu/load.hpp"
#include "cpu/parallel.hpp"

namespace heed::cpu {
namespace {

constexpr std::int64_t kRowsPerTask = 64;

// The element offset of row `row` (row-major over `rows`) through `strides`.
std::int64_t offset_of(const std::vector<std::int64_t>& rows, const std::vector<std::int64_t>& strides,
                       std::int64_t row) {
  std::int64_t offset = 0;
  for (std::size_t axis = rows.size(); axis-- > 0;) {
    offset += (row % rows[axis]) * strides[axis];
    row /= rows[axis];
  }
  return offset;
}

}  // namespace

void merge_states(const call::Merge& m) {
  std::int64_t count = 1;
  for (std::int64_t dim : m.rows) count *= dim;
  if (count == 0) return;
  const std::int64_t width = m.width;
  const std::int64_t tasks = (count + kRowsPerTask - 1) / kRowsPerTask;
  const int workers = static_cast<int>(std::min<std::int64_t>(tasks, cpu_info().threads));
  parallel_for(workers, tasks, [&](std::int64_t task, int) {
    std::vector<float> a(static_cast<std::size_t>(width)), b(static_cast<std::size_t>(width));
    const std::int64_t last = std::min(count, (task + 1) * kRowsPerTask);
    for (std::int64_t row = task * kRowsPerTask; row < last; ++row) {
      const float la = m.lse_a[offset_of(m.rows, m.lse_a_strides, row)];
      const float lb = m.lse_b[offset_of(m.rows, m.lse_b_strides, row)];
      // Both parts empty: zeros and -inf; a NaN part: NaN; else each part's share of the union's sum.
      const float top = std::fmax(la, lb);
      float lse = top == -INFINITY ? top : top + std::log(std::exp(la - top) + std::exp(lb - top));
      float wa = top == -INFINITY ? 0.0f : std::exp(la - lse);
      float wb = top == -INFINITY ? 0.0f : std::exp(lb - lse);
      if (std::isnan(la) || std::isnan(lb)) lse = wa = wb = std::numeric_limits<float>::quiet_NaN();
      const auto inner = [&](const std::vector<std::int64_t>& strides) { return strides.back(); };
      load_row(m.out_a, m.dtype, offset_of(m.rows, m.out_a_strides, row), inner(m.out_a_strides), width, a.data());
      load_row(m.out_b, m.dtype, offset_of(m.rows, m.out_b_strides, row), inner(m.out_b_strides), width, b.data());
      for (std::int64_t d = 0; d < width; ++d) {
        // A part of weight 0 adds nothing, even where its values are not finite.
        const float va = wa == 0.0f ? 0.0f : wa * a[d], vb = wb == 0.0f ? 0.0f : wb * b[d];
        a[d] = va + vb;
      }
      store_row(m.out, m.dtype, offset_of(m.rows, m.out_strides, row), inner(m.out_strides), width, a.data());
      m.lse[offset_of(m.rows, m.lse_strides, row)] = lse;
    }
  });
}

}  // namespace heed::cpu
