"""Plan once, run many: heed.runner, heed.runner_varlen and heed.runner_paged (heed/runner.hpp)."""

from __future__ import annotations

from typing import Any, Optional

from . import _heed
from . import _Call, _check_route_and_workspace, _current_stream, _flag, _framework, SupportsDLPack

__all__ = ["Runner", "runner", "runner_varlen", "runner_paged"]


class Runner:
    """One call, validated, planned and given its scratch once; run() launches the planned kernels
    on the bound arrays and does nothing else, so that it can be captured in a CUDA graph.

    Between runs the arrays' contents may change in place: the data, and metadata on the device
    (cu_seqlens, seqlens_k, block_table), which the kernels clamp to the plan's bounds (B and the
    max_seqlen_* of construction; unused sequences get length 0). Metadata on the host is read in
    place on the CPU; on CUDA it is copied to the device at construction and by update_metadata().
    The runner keeps its arrays alive. Make one with heed.runner, runner_varlen or runner_paged.
    """

    __slots__ = ("_impl", "_arrays", "_stream_source", "_framework")

    def __init__(self, impl: Any, arrays: tuple, stream_source: Any, cuda: bool):
        self._impl = impl
        self._arrays = arrays  # the caller's arrays (the module holds their DLPack imports too)
        self._stream_source = stream_source if cuda else None
        self._framework = _framework(stream_source) if cuda else ""

    @property
    def plan(self) -> _heed.Plan:
        """The plan made at construction."""
        return self._impl.plan

    def _stream(self, stream: Any) -> int:
        if stream is None:
            return _current_stream(self._stream_source, self._framework) if self._stream_source is not None else 0
        if isinstance(stream, int):
            return stream
        for name in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            if hasattr(stream, name):
                return int(getattr(stream, name))
        raise TypeError(f"[heed.Runner] stream must be None, an int or a CUDA stream object, got {type(stream).__name__}")

    def run(self, stream: Any = None) -> None:
        """Runs on `stream` (None: the current stream of q's library, as heed.attention; or a
        torch / CuPy stream, or a cudaStream_t as an int). Writes the bound out (and lse)."""
        self._impl.run(self._stream(stream))

    def update_metadata(self, stream: Any = None) -> None:
        """After host metadata changed in place: re-validates it against the plan (lengths within
        the bounds of construction) and, on CUDA, copies it to the device on `stream`."""
        self._impl.update_metadata(self._stream(stream))


def _start(op: str, q: Any, out: Any, causal: Any) -> tuple:
    if out is None:
        raise TypeError(f"[{op}] out is required: a runner writes into arrays bound at construction")
    return _Call(op, stream_source=q), _flag(causal, op, "causal")


def runner(
    q: SupportsDLPack, k: SupportsDLPack, v: SupportsDLPack, *, out: SupportsDLPack,
    lse: Optional[SupportsDLPack] = None, scale: Optional[float] = None, causal: bool = False,
    mask: Optional[SupportsDLPack] = None, window: Optional[int] = None, sinks: Optional[SupportsDLPack] = None,
    softcap: Optional[float] = None, max_score_bytes: Optional[int] = None, route: str = "auto",
    workspace: Optional[SupportsDLPack] = None, max_scratch_bytes: Optional[int] = None,
) -> Runner:
    """heed.attention's call as a Runner, writing `out` (and `lse`, float32 [B, Hq, Lq], where
    given) at each run. The arguments are attention's."""
    op = "heed.runner"
    call, causal = _start(op, q, out, causal)
    arrays = (q, k, v, out, lse, mask, sinks, workspace)
    _check_route_and_workspace(op, route, workspace)
    impl = _heed.runner_dense(call.prepare(q, "q"), call.prepare(k, "k"), call.prepare(v, "v"),
                              call.prepare(out, "out"), call.prepare(mask, "mask"), call.prepare(sinks, "sinks"),
                              scale, causal, window, softcap, max_score_bytes, call.stream, call.bf16, route,
                              workspace, max_scratch_bytes, call.prepare(lse, "lse"))
    return Runner(impl, arrays, q, call.cuda)


def runner_varlen(
    q: SupportsDLPack, k: SupportsDLPack, v: SupportsDLPack, cu_seqlens_q: SupportsDLPack,
    cu_seqlens_k: SupportsDLPack, *, out: SupportsDLPack, lse: Optional[SupportsDLPack] = None,
    scale: Optional[float] = None, causal: bool = False, window: Optional[int] = None,
    sinks: Optional[SupportsDLPack] = None, softcap: Optional[float] = None, max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None, route: str = "auto", workspace: Optional[SupportsDLPack] = None,
    max_scratch_bytes: Optional[int] = None,
) -> Runner:
    """heed.attention_varlen's call as a Runner (lse [total_q, Hq] where given). Give
    max_seqlen_q / max_seqlen_k to bound the sequences of later runs: the plan is sized by them."""
    op = "heed.runner_varlen"
    call, causal = _start(op, q, out, causal)
    arrays = (q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, sinks, workspace)
    _check_route_and_workspace(op, route, workspace)
    impl = _heed.runner_varlen(call.prepare(q, "q"), call.prepare(k, "k"), call.prepare(v, "v"),
                               call.prepare(cu_seqlens_q, "cu_seqlens_q"), call.prepare(cu_seqlens_k, "cu_seqlens_k"),
                               call.prepare(out, "out"), call.prepare(lse, "lse"), call.prepare(sinks, "sinks"),
                               scale, causal, window, softcap, max_seqlen_q, max_seqlen_k, call.stream, call.bf16,
                               route, workspace, max_scratch_bytes)
    return Runner(impl, arrays, q, call.cuda)


def runner_paged(
    q: SupportsDLPack, k_cache: SupportsDLPack, v_cache: SupportsDLPack, block_table: SupportsDLPack,
    seqlens_k: SupportsDLPack, *, out: SupportsDLPack, lse: Optional[SupportsDLPack] = None,
    cu_seqlens_q: Optional[SupportsDLPack] = None, scale: Optional[float] = None, causal: bool = False,
    window: Optional[int] = None, sinks: Optional[SupportsDLPack] = None, softcap: Optional[float] = None,
    max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None, route: str = "auto",
    workspace: Optional[SupportsDLPack] = None, max_scratch_bytes: Optional[int] = None,
) -> Runner:
    """heed.attention_paged's call as a Runner (lse [B, Hq] or [total_q, Hq] where given). The
    block table's width and max_seqlen_k bound the keys of later runs."""
    op = "heed.runner_paged"
    call, causal = _start(op, q, out, causal)
    arrays = (q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, out, lse, sinks, workspace)
    _check_route_and_workspace(op, route, workspace)
    impl = _heed.runner_paged(call.prepare(q, "q"), call.prepare(k_cache, "k_cache"),
                              call.prepare(v_cache, "v_cache"), call.prepare(block_table, "block_table"),
                              call.prepare(seqlens_k, "seqlens_k"), call.prepare(cu_seqlens_q, "cu_seqlens_q"),
                              call.prepare(out, "out"), call.prepare(lse, "lse"), call.prepare(sinks, "sinks"),
                              scale, causal, window, softcap, max_seqlen_q, max_seqlen_k, call.stream, call.bf16,
                              route, workspace, max_scratch_bytes)
    return Runner(impl, arrays, q, call.cuda)
