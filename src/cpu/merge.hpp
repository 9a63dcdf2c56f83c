#pragma once
// merge_states on the CPU: threads over rows.

#include "call/merge.hpp"

namespace heed::cpu {

void merge_states(const call::Merge& m);

}  // namespace heed::cpu
