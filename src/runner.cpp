// heed::Runner (heed/runner.hpp): the steps of prepared.hpp taken once at construction, the
// launches alone at each run.

#include "heed/runner.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

#include "call/validate.hpp"
#include "core/format.hpp"
#include "heed/error.hpp"
#include "memory/cpu_allocator.hpp"
#include "prepared.hpp"
#if HEED_HAS_CUDA
#include "cuda/runtime.hpp"
#endif

namespace heed {
namespace {

// The views of construction, kept to re-validate host metadata that changed in place.
struct Binding {
  TensorView q, k, v, out;
  float scale = 1.0f;
  AttentionOptions options;
  std::optional<RaggedBatch> ragged;
  std::optional<PagedKv> paged;
};

// The call of `b` with its lengths bound by the plan's (so that the problem stays the planned one).
call::Call validate_bound(const Binding& b, const call::Problem& planned) {
  if (b.ragged) {
    RaggedBatch batch = *b.ragged;
    batch.max_seqlen_q = planned.q_len;
    batch.max_seqlen_k = planned.kv_len;
    return call::validate_ragged(b.q, b.k, b.v, batch, &b.out, b.scale, b.options);
  }
  PagedKv pages = *b.paged;
  if (pages.cu_seqlens_q) pages.max_seqlen_q = planned.q_len;
  pages.max_seqlen_k = planned.kv_len;
  return call::validate_paged(b.q, b.k, b.v, pages, &b.out, b.scale, b.options);
}

}  // namespace

struct Runner::State {
  Binding binding;
  detail::PreparedCall prepared;  // on CUDA it reads the device copy of host metadata
  std::byte* scratch = nullptr;
  void* cpu_block = nullptr;  // owned CPU scratch (none with a workspace)
#if HEED_HAS_CUDA
  std::unique_ptr<cuda::Scratch> device_scratch;
#endif

  State(Binding b, detail::PreparedCall p) : binding(std::move(b)), prepared(std::move(p)) {}
  ~State() { memory::cpu_free(cpu_block, prepared.plan().scratch_bytes); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  static std::unique_ptr<State> make(Binding binding, const call::Call& c, Stream stream) {
    detail::PreparedCall prepared = detail::prepare(c, binding.q.device, binding.options, detail::Planning::Owned);
    auto state = std::make_unique<State>(std::move(binding), std::move(prepared));
    state->hold_scratch(stream);
    return state;
  }

  // Takes the plan's scratch (the caller's workspace where given) and, on CUDA, copies host
  // metadata to it; waits for `stream` so that any stream may run next.
  void hold_scratch(Stream stream) {
    const std::size_t bytes = prepared.plan().scratch_bytes;
    const char* op = call::op_of(prepared.call);
#if HEED_HAS_CUDA
    if (prepared.on_cuda()) {
      const int device = prepared.device.index;
      device_scratch = cuda::hold_scratch(device, bytes, binding.options.workspace, stream.handle, op);
      scratch = device_scratch->data();
      if (prepared.call.host_metadata > 0 && !prepared.call.empty_output()) {
        prepared.call = cuda::upload_metadata(prepared.call, prepared.cuda(), scratch, stream.handle);
      }
      cuda::synchronize(device, stream.handle, op);
      return;
    }
#endif
    (void)stream;
    if (binding.options.workspace != nullptr) {
      scratch = static_cast<std::byte*>(binding.options.workspace);
    } else {
      cpu_block = memory::cpu_allocate(bytes, op, "a runner's scratch");
      scratch = static_cast<std::byte*>(cpu_block);
    }
  }
};

Runner::Runner(std::unique_ptr<State> state) : state_(std::move(state)) {}
Runner::Runner(Runner&&) noexcept = default;
Runner& Runner::operator=(Runner&&) noexcept = default;
Runner::~Runner() = default;

Runner Runner::dense(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     float scale, const AttentionOptions& options, Stream stream) {
  const call::Call c = call::validate_call(q, k, v, out, scale, options);
  return Runner(State::make(Binding{q, k, v, out, scale, options, std::nullopt, std::nullopt}, c, stream));
}

Runner Runner::varlen(const TensorView& q, const TensorView& k, const TensorView& v, const RaggedBatch& batch,
                      const TensorView& out, float scale, const AttentionOptions& options, Stream stream) {
  const call::Call c = call::validate_ragged(q, k, v, batch, &out, scale, options);
  return Runner(State::make(Binding{q, k, v, out, scale, options, batch, std::nullopt}, c, stream));
}

Runner Runner::paged(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache, const PagedKv& pages,
                     const TensorView& out, float scale, const AttentionOptions& options, Stream stream) {
  const call::Call c = call::validate_paged(q, k_cache, v_cache, pages, &out, scale, options);
  return Runner(State::make(Binding{q, k_cache, v_cache, out, scale, options, std::nullopt, pages}, c, stream));
}

const AttentionPlan& Runner::plan() const {
  if (!state_) throw Error(ErrorKind::InvalidArgument, "[heed::Runner::plan] the runner was moved from");
  return state_->prepared.plan();
}

void Runner::run(Stream stream) {
  if (!state_) throw Error(ErrorKind::InvalidArgument, "[heed::Runner::run] the runner was moved from");
#if HEED_HAS_CUDA
  if (state_->device_scratch) state_->device_scratch->release_on(stream.handle);
#endif
  detail::launch(state_->prepared, state_->scratch, stream);
}

void Runner::update_metadata(Stream stream) {
  if (!state_) throw Error(ErrorKind::InvalidArgument, "[heed::Runner::update_metadata] the runner was moved from");
  State& s = *state_;
  if (!s.binding.ragged && !s.binding.paged) return;
  const call::Call fresh = validate_bound(s.binding, s.prepared.call);
  if (!(static_cast<const call::Problem&>(fresh) == static_cast<const call::Problem&>(s.prepared.call))) {
    throw Error(ErrorKind::InvalidArgument,
                format("[{}] the metadata no longer matches the runner's plan", call::op_of(fresh)));
  }
#if HEED_HAS_CUDA
  if (s.prepared.on_cuda() && fresh.host_metadata > 0 && !fresh.empty_output()) {
    s.prepared.call = cuda::upload_metadata(fresh, s.prepared.cuda(), s.scratch, stream.handle);
  }
#endif
  (void)stream;
}

}  // namespace heed
