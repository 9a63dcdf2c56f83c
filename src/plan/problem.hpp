#pragma once
// The planner reads the call descriptor's Problem (call/call.hpp), built by call/validate.cpp.

#include "call/call.hpp"
#include "call/validate.hpp"

namespace heed::plan {

using call::describe;
using call::kOp;
using call::MaskKind;
using call::Problem;
using call::validate_problem;
using call::validate_views;

}  // namespace heed::plan
