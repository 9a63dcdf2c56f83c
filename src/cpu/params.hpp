#pragma once
// What every CPU kernel reads: the call descriptor (call/call.hpp), as validation built it.

#include <cstdint>
#include <limits>

#include "call/call.hpp"
#include "score/score.hpp"

namespace heed::cpu {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using call::Call;
using call::MaskKind;
using call::Strides;
using score::KeyRange;

}  // namespace heed::cpu
