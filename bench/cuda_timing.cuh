#pragma once
// What the GPU benchmarks (heed_cuda_bench, heed_cuda_serving_bench) share: the device's ceilings
// measured in the same run (copy and read bandwidth, cuBLAS bfloat16 GEMM rate), random bfloat16
// inputs, and the two timings: calls between CUDA events (median_ms) and calls captured into a
// CUDA graph and replayed (graph_ms), the device's time without host work.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

namespace heed::gpu_bench {

// The program's name, which starts its error messages; each benchmark defines it.
extern const char* const kProgram;

// Exits with `what` and CUDA's message unless `status` is cudaSuccess.
void ok(cudaError_t status, const char* what);

// Repetitions within about `budget_ms` of device time for a call of `call_ms`: between 3 and `reps`.
int reps_within(double call_ms, double budget_ms, int reps);

// `count` bfloat16 values in [-1.5, 1.5) on the current device, the same for the same seed.
__nv_bfloat16* random_bf16(std::int64_t count, std::uint32_t seed);

// Device-to-device copy of 1 GiB, bytes read + written per second (TB/s).
double copy_tbytes();
// A kernel that reads 1 GiB, bytes read per second (TB/s): the ceiling of decode.
double read_tbytes();
// cuBLAS bfloat16 GEMM (float32 accumulation) of 8192^3, TFLOP/s: the ceiling of prefill.
double gemm_tflops();

// The median of `reps` calls, each between two events recorded on `stream` (the calls' stream).
template <typename F>
double median_ms(F&& call, int warmup, int reps, cudaStream_t stream = nullptr) {
  cudaEvent_t start, stop;
  ok(cudaEventCreate(&start), "event");
  ok(cudaEventCreate(&stop), "event");
  for (int i = 0; i < warmup; ++i) call();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    ok(cudaEventRecord(start, stream), "record");
    call();
    ok(cudaEventRecord(stop, stream), "record");
    ok(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    times.push_back(ms);
  }
  ok(cudaEventDestroy(start), "event");
  ok(cudaEventDestroy(stop), "event");
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Calls captured into one graph by graph_ms: 20, fewer for calls of more than 2.5 ms (at least 2),
// so that a replay takes about 50 ms or less.
int graph_calls(double call_ms);

// The device time of one call without host work: `calls` calls of `call(stream)` captured into a
// CUDA graph on a stream of its own (non-blocking, relaxed capture: heed's scratch comes from
// cudaMallocFromPoolAsync, which captures as memory nodes), the graph instantiated and replayed
// once, then its replays timed between events on that stream (median; within about `budget_ms`,
// 3 to `reps` replays), over `calls`. Where a step fails (a CUDA error or an exception from the
// call) it says so on stderr, clears the error, ends the capture, destroys what it made and
// returns -1: the bench goes on.
template <typename F>
double graph_ms(F&& call, int calls, double budget_ms, int reps) {
  const auto failed = [](cudaError_t status, const char* what) {
    if (status == cudaSuccess) return false;
    std::fprintf(stderr, "%s: graph: %s: %s\n", kProgram, what, cudaGetErrorString(status));
    (void)cudaGetLastError();
    return true;
  };
  cudaStream_t stream = nullptr;
  if (failed(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) return -1;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool good = !failed(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  if (good) {
    try {
      for (int i = 0; i < calls; ++i) call(stream);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "%s: graph: the captured call threw: %s\n", kProgram, error.what());
      good = false;
    } catch (...) {
      std::fprintf(stderr, "%s: graph: the captured call threw\n", kProgram);
      good = false;
    }
    // Ended whatever happened, so that the stream leaves capture (an invalidated capture ends
    // with an error and no graph).
    const bool ended = !failed(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    good = good && ended && graph != nullptr;
  }
  if (good) good = !failed(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  if (good) {
    good = !failed(cudaGraphLaunch(exec, stream), "cudaGraphLaunch") &&
           !failed(cudaStreamSynchronize(stream), "the warm-up replay");
  }
  double ms = -1;
  if (good) {
    const auto replay = [&] { good = good && !failed(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); };
    const double first_ms = median_ms(replay, 0, 1, stream);
    const double replay_ms = median_ms(replay, 0, reps_within(first_ms, budget_ms, reps), stream);
    if (good) ms = replay_ms / calls;
  }
  (void)cudaStreamSynchronize(stream);
  if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  (void)cudaStreamDestroy(stream);
  // The graph's memory nodes keep their memory cached for the device's graphs: given back here.
  (void)cudaDeviceGraphMemTrim(0);
  (void)cudaGetLastError();
  return ms;
}

}  // namespace heed::gpu_bench
