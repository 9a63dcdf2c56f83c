#pragma once
// heed's CPU threads: a persistent pool that runs one job at a time.

#include <cstdint>
#include <functional>

namespace heed::cpu {

// Runs body(task, worker) for every task in [0, tasks) on `workers` threads (the caller is
// worker 0); tasks are taken in order from a shared counter. Calls from inside a body run
// serially on the calling thread. The first exception a body throws is rethrown.
void parallel_for(int workers, std::int64_t tasks, const std::function<void(std::int64_t, int)>& body);

}  // namespace heed::cpu
