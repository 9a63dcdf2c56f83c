#pragma once
// The checks validate.cpp and validate_serving.cpp share: each throws InvalidArgument as
// "[op] ..." with the values; the layout facts are pure.

#include <initializer_list>
#include <string>

#include "call/call.hpp"
#include "heed/options.hpp"
#include "heed/tensor.hpp"

namespace heed::call::detail {

[[noreturn]] void invalid(const char* op, const std::string& message);
void check_floating(DType dtype, const char* name, const char* op);
void check_strides(const TensorView& view, const char* name, const char* op);
void check_data(const TensorView& view, const char* name, const char* op);
void check_device(const TensorView& view, const char* name, const TensorView& q, const char* op);
void check_sinks(const TensorView& sinks, std::int64_t q_heads, const char* op);

// Layout facts of a [B, H, L, E] view (call.hpp's Problem says what each means).
bool rows_contiguous(const TensorView& view);
bool rows_wide(const TensorView& view);
bool batch_folds(const TensorView& view);
// A key row's heads lie within its row stride (more than one head, stride-1 rows).
bool heads_in_rows(const TensorView& view);
bool strides_positive(const TensorView& view);
Strides strides_of(const TensorView& view);

// The options every form shares (sinks, window, softcap, budgets) into p.
void check_options(Problem& p, const AttentionOptions& options, const char* op);
// out (of shape `expected`), the scale, the data and devices of mask and sinks, the workspace's
// alignment; sets c.out and c.scale (the caller sets out's strides).
void attach_output(Call& c, const TensorView& q, const TensorView& out, const Shape& expected, float scale,
                   const AttentionOptions& options, const char* op);
// options.lse, float32 of shape `expected`; lse axis a has the descriptor's [b, h, i] axis axes[a]
// (-1: none).
void attach_lse(Call& c, const TensorView& q, const AttentionOptions& options, const Shape& expected,
                std::initializer_list<int> axes, const char* op);

}  // namespace heed::call::detail
