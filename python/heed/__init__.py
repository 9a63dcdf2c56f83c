"""heed: exact scaled-dot-product attention on CPUs and NVIDIA GPUs, planned and explained.

    import numpy as np, heed
    q = np.random.randn(1, 8, 128, 64).astype(np.float32)      # [B, Hq, Lq, D]
    k = np.random.randn(1, 2, 128, 64).astype(np.float32)      # [B, Hkv, Lk, D]
    v = np.random.randn(1, 2, 128, 64).astype(np.float32)      # [B, Hkv, Lk, Dv]
    out = heed.attention(q, k, v, causal=True)                 # numpy in, numpy out

Arrays of any library that speaks DLPack (numpy, PyTorch, CuPy, JAX), on the CPU or a CUDA
device, with any strides, are read in place; the result is an array of q's library on q's
device (or the caller's `out`). `heed.torch.attention` is the same call as a PyTorch custom op.

The serving forms: `attention_varlen` (ragged batches, cu_seqlens), `attention_paged` (paged KV
caches, block tables), `return_lse=True` on every form for each row's log-sum-exp, and
`merge_states` to combine two partial results exactly. `runner`, `runner_varlen` and
`runner_paged` plan a call once and run it many times (CUDA-graph capturable).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from typing import TYPE_CHECKING, Any, Optional, Protocol, Tuple, TypeVar, Union

import numpy as np

from . import _heed
from . import profile
from ._heed import LayerPlan, MemoryStats, Plan
from .layer import MultiHeadAttention

__all__ = ["attention", "attention_varlen", "attention_paged", "merge_states", "plan", "plan_varlen", "plan_paged",
           "Runner", "runner", "runner_varlen", "runner_paged",
           "memory_stats", "reset_peak", "empty_cache", "cache_limit", "set_cache_limit",
           "profile", "Plan", "MemoryStats",
           "MultiHeadAttention", "LayerPlan"]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from types import ModuleType

    torch: ModuleType  # heed.torch, imported on first use


class SupportsDLPack(Protocol):
    """Any array with DLPack export: numpy, PyTorch, CuPy and JAX arrays."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> Any: ...


ArrayT = TypeVar("ArrayT")
Shape = Tuple[int, ...]
DeviceLike = Union[str, Any, None]

# DLPack device types (dlpack.h) and the bit of each argument that holds bfloat16 as uint16.
_DL_CUDA, _DL_CUDA_MANAGED = 2, 13
# A paged call's caches take k's and v's bits; merge_states' parts have their own.
_BF16_BITS = {"q": 1, "k": 2, "v": 4, "out": 8, "mask": 16, "sinks": 32, "k_cache": 2, "v_cache": 4, "out_a": 64,
              "out_b": 128}


def __getattr__(name: str) -> Any:
    # `heed.torch` needs PyTorch; it is imported when first used, not by `import heed`.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'heed' has no attribute '{name}'")


def _framework(array: Any) -> str:
    """The library an array belongs to: numpy, torch, cupy, jax, or other."""
    if isinstance(array, np.ndarray):
        return "numpy"
    for name, type_path in (("torch", "Tensor"), ("cupy", "ndarray"), ("jax", "Array")):
        module = sys.modules.get(name)
        if module is not None and isinstance(array, getattr(module, type_path)):
            return name
    return "other"


def _is_cuda(array: Any) -> bool:
    try:
        device_type = array.__dlpack_device__()[0]
    except Exception:  # a device DLPack cannot name (PyTorch's meta): the import raises NotImplementedError
        return False
    return int(device_type) in (_DL_CUDA, _DL_CUDA_MANAGED)


def _flag(value: Any, op: str, name: str) -> bool:
    """A bool or numpy.bool_ as bool; TypeError for anything else (an int is no flag)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"[{op}] {name} must be a bool, got {type(value).__module__}.{type(value).__qualname__}")


def _torch_tensor_type() -> Any:
    """torch.Tensor where torch is imported (heed never imports it), else None."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


def _torch_stream(tensor: Any) -> int:
    """The current stream of a CUDA tensor's device, as a cudaStream_t (0: the legacy default)."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:  # one C call, where torch.cuda.current_stream makes a Stream object
        return int(raw(tensor.get_device()))
    return int(torch.cuda.current_stream(tensor.device).cuda_stream)


def _current_stream(array: Any, framework: str) -> int:
    """The caller's current CUDA stream for this array (0: the default stream)."""
    if framework == "torch":
        return _torch_stream(array)
    if framework == "cupy":
        import cupy  # type: ignore[import-not-found]

        with array.device:
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


class _Call:
    """One call's arrays, made ready for the C++ module without copying any of them.

    An exact torch.Tensor passes as it is: the module reads its pointer, shape, strides and device
    directly (torch_views.cpp), on the current stream of q's device, which is where PyTorch
    orders the tensor's work; DLPack's stream handshake would only confirm that stream."""

    def __init__(self, op: str, stream_source: Any = None):
        self.op = op
        self.bf16 = 0
        self.stream = 0
        self.cuda = False
        self.torch_tensor = _torch_tensor_type()
        if stream_source is None:
            return
        if self.torch_tensor is not None and type(stream_source) is self.torch_tensor:
            if stream_source.is_cuda:
                self.cuda = True
                self.stream = _torch_stream(stream_source)
        elif _has_dlpack(stream_source) and _is_cuda(stream_source):
            self.cuda = True
            self.stream = _current_stream(stream_source, _framework(stream_source))

    def prepare(self, array: Any, name: str) -> Any:
        if array is None and name in ("mask", "sinks", "cu_seqlens_q", "lse"):
            return None
        if self.torch_tensor is not None and type(array) is self.torch_tensor:
            return array
        if not _has_dlpack(array):
            raise TypeError(
                f"[{self.op}] {name} must be an array that supports DLPack (numpy, PyTorch, CuPy, JAX), "
                f"got {type(array).__module__}.{type(array).__qualname__}")
        framework = _framework(array)
        if framework == "numpy" and array.dtype.kind == "V" and array.dtype.name == "bfloat16" and name in _BF16_BITS:
            # numpy's DLPack export has no bfloat16: pass the same memory as uint16.
            self.bf16 |= _BF16_BITS[name]
            return array.view(np.uint16)
        if framework == "torch":  # a subclass (nn.Parameter, ...): through DLPack
            if array.requires_grad:
                array = array.detach()
            if self.cuda and _is_cuda(array):
                # DLPack's stream argument: the producer orders its work before this stream.
                return _dlpack_capsule(array, self.stream or 1)
        if framework == "cupy" and self.cuda and _is_cuda(array):
            return _dlpack_capsule(array, self.stream or 1)
        if framework == "jax":
            array.block_until_ready()  # JAX computes asynchronously; heed reads it now
        return array


def _has_dlpack(array: Any) -> bool:
    return hasattr(array, "__dlpack__") and hasattr(array, "__dlpack_device__")


def _dlpack_capsule(array: Any, stream: int) -> Any:
    try:
        return array.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:
        return array.__dlpack__(stream=stream)


def _out_shape(q: Any, v: Any) -> Optional[Shape]:
    q_shape, v_shape = tuple(getattr(q, "shape", ())), tuple(getattr(v, "shape", ()))
    if len(q_shape) != 4 or len(v_shape) != 4:
        return None
    return (int(q_shape[0]), int(q_shape[1]), int(q_shape[2]), int(v_shape[3]))


def _empty(like: Any, shape: Shape, op: str = "heed.attention", float32: bool = False) -> Tuple[Any, Any]:
    """An uninitialised array of `like`'s library and device, of its dtype (float32 for an lse):
    (what to return, what heed writes)."""
    framework = _framework(like)
    out: Any
    if framework == "numpy":
        out = np.empty(shape, dtype=np.float32 if float32 else like.dtype)
        return out, out
    if framework == "torch":
        import torch

        out = like.new_empty(shape, dtype=torch.float32 if float32 else like.dtype)
        return out, out
    if framework == "cupy":
        import cupy  # type: ignore[import-not-found]

        with like.device:
            out = cupy.empty(shape, dtype=np.float32 if float32 else like.dtype)
        return out, out
    if framework == "jax":
        result = _JaxResult(like, shape, float32)
        return result, result.buffer
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is not None:
        xp = namespace()
        out = xp.empty(shape, dtype=xp.float32 if float32 else like.dtype, device=like.device)
        return out, out
    if not _is_cuda(like):
        out = np.empty(shape, dtype=np.float32 if float32 else np.dtype(str(like.dtype)))
        return out, out
    raise TypeError(f"[{op}] cannot allocate the result for q of type {type(like).__qualname__}; pass out=")


def _finish(result: Any) -> Any:
    """What the caller gets for an array _empty made (JAX takes its buffer now)."""
    return result.finish() if isinstance(result, _JaxResult) else result


class _JaxResult:
    """JAX arrays are immutable: heed writes into a buffer of numpy (CPU) or of PyTorch or
    CuPy (CUDA) and JAX takes that buffer through DLPack."""

    def __init__(self, like: Any, shape: Shape, float32: bool = False):
        device = next(iter(like.devices()))
        dtype = np.dtype(np.float32) if float32 else np.dtype(like.dtype)
        self.buffer: Any
        if device.platform == "cpu":
            self.buffer = np.empty(shape, dtype=dtype)
        elif "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
            import torch

            self.buffer = torch.empty(shape, dtype=getattr(torch, dtype.name), device=f"cuda:{device.id}")
        elif importlib.util.find_spec("cupy") is not None:
            import cupy  # type: ignore[import-not-found]

            with cupy.cuda.Device(device.id):
                self.buffer = cupy.empty(shape, dtype=dtype)
        else:
            raise NotImplementedError("[heed.attention] JAX arrays on CUDA need PyTorch or CuPy to hold the result")

    def finish(self) -> Any:
        import jax.numpy as jnp  # type: ignore[import-not-found]

        if isinstance(self.buffer, np.ndarray) and self.buffer.dtype.kind == "V":
            return jnp.asarray(self.buffer)  # numpy's DLPack has no bfloat16: JAX copies the result
        return jnp.from_dlpack(self.buffer)


class _Outputs:
    """A call's out (the caller's, or a new array of q's library on q's device) and, where asked,
    its lse: a new float32 array of the same library, out's shape without its last dimension."""

    def __init__(self, op: str, q: Any, out: Any, shape: Optional[Shape], return_lse: bool):
        if out is None:
            assert shape is not None
            self.result, self.target = _empty(q, shape, op)
        else:
            if _framework(out) == "jax":
                raise ValueError(f"[{op}] out cannot be a JAX array: JAX arrays are immutable")
            self.result = self.target = out
        self.return_lse = return_lse
        self.lse: Any = None
        self.lse_target: Any = None
        if return_lse:
            lse_shape = tuple(int(n) for n in tuple(getattr(q, "shape", ()))[:-1])
            self.lse, self.lse_target = _empty(q, lse_shape, op, float32=True)

    def finish(self) -> Any:
        out = _finish(self.result)
        return (out, _finish(self.lse)) if self.return_lse else out


def _check_route_and_workspace(op: str, route: Any, workspace: Any) -> None:
    if not isinstance(route, str):
        raise TypeError(f"[{op}] route must be a str, got {type(route).__name__}")
    if workspace is not None and not _has_dlpack(workspace):
        raise TypeError(f"[{op}] workspace must be an array that supports DLPack, got "
                        f"{type(workspace).__module__}.{type(workspace).__qualname__}")


def attention(
    q: ArrayT,
    k: SupportsDLPack,
    v: SupportsDLPack,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    mask: Optional[SupportsDLPack] = None,
    window: Optional[int] = None,
    sinks: Optional[SupportsDLPack] = None,
    softcap: Optional[float] = None,
    max_score_bytes: Optional[int] = None,
    out: Optional[SupportsDLPack] = None,
    route: str = "auto",
    workspace: Optional[SupportsDLPack] = None,
    max_scratch_bytes: Optional[int] = None,
    return_lse: bool = False,
) -> Any:
    """softmax(scale * q·kᵀ + mask) · v, exactly, for q [B, Hq, Lq, D], k [B, Hkv, Lk, D],
    v [B, Hkv, Lk, Dv] -> [B, Hq, Lq, Dv] (Hq a multiple of Hkv: GQA, MQA).

    scale: defaults to 1/sqrt(D). causal: bottom-right aligned, query i sees key j iff
    j <= i + (Lk - Lq). mask: bool (True attends) or additive float, broadcastable to
    [B, Hq, Lq, Lk] (rank 2 or 4). window: causal sliding window, also j > i + (Lk - Lq) - window.
    sinks: [Hq] logits added to each softmax denominator as exp(sink), unscaled.
    softcap: c > 0 turns each scaled score s into c * tanh(s / c) before the mask is added
    (Gemma 2: 50). max_score_bytes: no score-sized intermediate above this many bytes. A row that sees no key
    is zeros. route: 'auto', or 'vector', 'tiled', 'composed' to force one (as PyTorch's sdpa_kernel).
    workspace: a writable, contiguous array on the call's device of at least the plan's
    scratch_bytes (16-byte aligned), any dtype: heed then allocates nothing for the call.
    max_scratch_bytes: a budget on all of the call's scratch; the plan takes forms that need less
    or the error names the smallest budget that fits.
    return_lse: also return each row's log-sum-exp, float32 [B, Hq, Lq], natural log, over the
    row's visible final scores and the sink's logit (-inf for a row with no key and no sink), so
    that merge_states combines calls over disjoint keys exactly.
    Returns a new array of q's library on q's device, or `out` filled in place; with return_lse
    the pair (out, lse), lse a new float32 array of q's library.
    On CUDA heed runs on the caller's current stream. Errors: ValueError (invalid input),
    TypeError (not an array), MemoryError, NotImplementedError (unsupported device or dtype).
    """
    op = "heed.attention"
    causal = _flag(causal, op, "causal")
    return_lse = _flag(return_lse, op, "return_lse")
    call = _Call(op, stream_source=q)
    q_in, k_in, v_in = call.prepare(q, "q"), call.prepare(k, "k"), call.prepare(v, "v")
    mask_in, sinks_in = call.prepare(mask, "mask"), call.prepare(sinks, "sinks")
    shape = None
    if out is None:
        shape = _out_shape(q, v)
        if shape is None:  # heed names the wrong rank
            _heed.plan_views(q_in, k_in, v_in, mask_in, sinks_in, causal, window, softcap, max_score_bytes, call.bf16,
                             route if isinstance(route, str) else "auto")
            raise ValueError("[heed.attention] q and v must have rank 4")
    outputs = _Outputs(op, q, out, shape, return_lse)
    target_in, lse_in = call.prepare(outputs.target, "out"), call.prepare(outputs.lse_target, "lse")
    _check_route_and_workspace(op, route, workspace)
    _heed.attention_into(q_in, k_in, v_in, target_in, mask_in, sinks_in, scale, causal, window, softcap,
                         max_score_bytes, call.stream, call.bf16, route, workspace, max_scratch_bytes, lse_in)
    return outputs.finish()


def _rows_shape(q: Any, v: Any, q_rank: int, v_rank: int) -> Optional[Shape]:
    """out's shape for q [rows, Hq, D] and values of rank v_rank (Dv last): [rows, Hq, Dv]."""
    q_shape, v_shape = tuple(getattr(q, "shape", ())), tuple(getattr(v, "shape", ()))
    if len(q_shape) != q_rank or len(v_shape) != v_rank:
        return None
    return (int(q_shape[0]), int(q_shape[1]), int(v_shape[-1]))


def attention_varlen(
    q: ArrayT,
    k: SupportsDLPack,
    v: SupportsDLPack,
    cu_seqlens_q: SupportsDLPack,
    cu_seqlens_k: SupportsDLPack,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    sinks: Optional[SupportsDLPack] = None,
    softcap: Optional[float] = None,
    return_lse: bool = False,
    out: Optional[SupportsDLPack] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    route: str = "auto",
    workspace: Optional[SupportsDLPack] = None,
    max_scratch_bytes: Optional[int] = None,
) -> Any:
    """Attention over a ragged batch (FlashAttention's varlen layout): q [total_q, Hq, D],
    k [total_k, Hkv, D], v [total_k, Hkv, Dv] -> [total_q, Hq, Dv]. Sequence b's queries are rows
    cu_seqlens_q[b] to cu_seqlens_q[b + 1] of q, its keys those of cu_seqlens_k in k and v;
    cu_seqlens_* are int32 [B + 1], non-decreasing from 0 to the totals, on the host or q's device.

    causal and window are bottom-right aligned within each sequence: query i of a sequence of
    Lq_b queries and Lk_b keys sees key j iff j <= i + (Lk_b - Lq_b). max_seqlen_q, max_seqlen_k:
    bounds on the sequences' lengths that size the plan, read from cu_seqlens where those are on
    the host, required where they are on a device. scale, sinks, softcap, route, workspace,
    max_scratch_bytes and return_lse (lse [total_q, Hq]) are attention's; there is no mask.
    Returns a new array of q's library on q's device, or `out` filled in place; with return_lse
    the pair (out, lse). Errors as attention's.
    """
    op = "heed.attention_varlen"
    causal = _flag(causal, op, "causal")
    return_lse = _flag(return_lse, op, "return_lse")
    call = _Call(op, stream_source=q)
    q_in, k_in, v_in = call.prepare(q, "q"), call.prepare(k, "k"), call.prepare(v, "v")
    cu_q_in, cu_k_in = call.prepare(cu_seqlens_q, "cu_seqlens_q"), call.prepare(cu_seqlens_k, "cu_seqlens_k")
    sinks_in = call.prepare(sinks, "sinks")
    shape = None
    if out is None:
        shape = _rows_shape(q, v, 3, 3)
        if shape is None:  # heed names the wrong rank
            _heed.plan_varlen(q_in, k_in, v_in, cu_q_in, cu_k_in, sinks_in, causal, window, softcap, max_seqlen_q,
                              max_seqlen_k, call.bf16)
            raise ValueError(f"[{op}] q and v must have rank 3")
    outputs = _Outputs(op, q, out, shape, return_lse)
    target_in, lse_in = call.prepare(outputs.target, "out"), call.prepare(outputs.lse_target, "lse")
    _check_route_and_workspace(op, route, workspace)
    _heed.attention_varlen_into(q_in, k_in, v_in, cu_q_in, cu_k_in, target_in, lse_in, sinks_in, scale, causal,
                                window, softcap, max_seqlen_q, max_seqlen_k, call.stream, call.bf16, route,
                                workspace, max_scratch_bytes)
    return outputs.finish()


def attention_paged(
    q: ArrayT,
    k_cache: SupportsDLPack,
    v_cache: SupportsDLPack,
    block_table: SupportsDLPack,
    seqlens_k: SupportsDLPack,
    *,
    cu_seqlens_q: Optional[SupportsDLPack] = None,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    sinks: Optional[SupportsDLPack] = None,
    softcap: Optional[float] = None,
    return_lse: bool = False,
    out: Optional[SupportsDLPack] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    route: str = "auto",
    workspace: Optional[SupportsDLPack] = None,
    max_scratch_bytes: Optional[int] = None,
) -> Any:
    """Attention over a paged KV cache (vLLM's block tables): k_cache [num_pages, page_size, Hkv, D]
    and v_cache [num_pages, page_size, Hkv, Dv], any strides (a head-major cache, permuted, too),
    read in place. Sequence b has seqlens_k[b] keys; its key j is row j % page_size of page
    block_table[b, j // page_size]. block_table int32 [B, max_pages], seqlens_k int32 [B]; pages
    may be shared between sequences.

    q [B, Hq, D] holds one query per sequence (decode), or with cu_seqlens_q (int32 [B + 1])
    q [total_q, Hq, D] holds the last cu_seqlens_q[b + 1] - cu_seqlens_q[b] queries of sequence b
    (chunked prefill, speculative decoding); out has q's shape with Dv last, lse ([B, Hq] or
    [total_q, Hq]) without it. causal and window are bottom-right aligned per sequence, as in
    attention_varlen; max_seqlen_q, max_seqlen_k and the other arguments are attention_varlen's.
    Returns a new array of q's library, or `out` filled in place; with return_lse (out, lse).
    """
    op = "heed.attention_paged"
    causal = _flag(causal, op, "causal")
    return_lse = _flag(return_lse, op, "return_lse")
    call = _Call(op, stream_source=q)
    q_in, k_in, v_in = call.prepare(q, "q"), call.prepare(k_cache, "k_cache"), call.prepare(v_cache, "v_cache")
    table_in, lengths_in = call.prepare(block_table, "block_table"), call.prepare(seqlens_k, "seqlens_k")
    cu_q_in, sinks_in = call.prepare(cu_seqlens_q, "cu_seqlens_q"), call.prepare(sinks, "sinks")
    shape = None
    if out is None:
        shape = _rows_shape(q, v_cache, 3, 4)
        if shape is None:  # heed names the wrong rank
            _heed.plan_paged(q_in, k_in, v_in, table_in, lengths_in, cu_q_in, sinks_in, causal, window, softcap,
                             max_seqlen_q, max_seqlen_k, call.bf16)
            raise ValueError(f"[{op}] q must have rank 3 and v_cache rank 4")
    outputs = _Outputs(op, q, out, shape, return_lse)
    target_in, lse_in = call.prepare(outputs.target, "out"), call.prepare(outputs.lse_target, "lse")
    _check_route_and_workspace(op, route, workspace)
    _heed.attention_paged_into(q_in, k_in, v_in, table_in, lengths_in, cu_q_in, target_in, lse_in, sinks_in, scale,
                               causal, window, softcap, max_seqlen_q, max_seqlen_k, call.stream, call.bf16, route,
                               workspace, max_scratch_bytes)
    return outputs.finish()


def merge_states(
    out_a: ArrayT,
    lse_a: SupportsDLPack,
    out_b: SupportsDLPack,
    lse_b: SupportsDLPack,
    *,
    out: Optional[SupportsDLPack] = None,
) -> Tuple[Any, Any]:
    """The exact union of two partial results over disjoint key sets of the same queries, from
    their log-sum-exps: lse = log(exp(lse_a) + exp(lse_b)), out = exp(lse_a - lse) · out_a +
    exp(lse_b - lse) · out_b. out_* [..., Dv] share one floating dtype, lse_* are float32 of their
    shape without the last dimension. A part whose lse is -inf (no key) adds nothing; both -inf give
    zeros and -inf. Give sinks to one part only. out may be out_a (in place).
    Returns (out, lse): a new out of out_a's library (or `out` filled in place) and a new lse.
    """
    op = "heed.merge_states"
    call = _Call(op, stream_source=out_a)
    a_in, lse_a_in = call.prepare(out_a, "out_a"), call.prepare(lse_a, "lse_a")
    b_in, lse_b_in = call.prepare(out_b, "out_b"), call.prepare(lse_b, "lse_b")
    shape = tuple(int(n) for n in getattr(out_a, "shape", ()))
    outputs = _Outputs(op, out_a, out, shape, True)
    _heed.merge_states_into(a_in, lse_a_in, b_in, lse_b_in, call.prepare(outputs.target, "out"),
                            call.prepare(outputs.lse_target, "lse"), call.stream, call.bf16)
    return outputs.finish()


def _dtype_name(dtype: Any) -> str:
    """'float32', 'bf16', np.float16, torch.bfloat16, ml_dtypes.bfloat16 -> heed's dtype name."""
    if isinstance(dtype, str):
        return dtype
    name = str(dtype)
    return name[len("torch."):] if name.startswith("torch.") else np.dtype(dtype).name


def _device_name(device: DeviceLike, default: str = "cpu") -> str:
    """None (-> default), 'cpu', 'cuda', 'cuda:1' or a torch.device -> 'cpu' / 'cuda:N'."""
    if device is None:
        return default
    if isinstance(device, str):
        return device
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if kind == "cuda":
        return f"cuda:{index or 0}"
    if kind == "cpu":
        return "cpu"
    raise ValueError(f"[heed] device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, got {device!r}")


def plan(
    q: Union[SupportsDLPack, Shape],
    k: Union[SupportsDLPack, Shape],
    v: Union[SupportsDLPack, Shape],
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    mask: Optional[SupportsDLPack] = None,
    window: Optional[int] = None,
    sinks: Optional[SupportsDLPack] = None,
    softcap: Optional[float] = None,
    max_score_bytes: Optional[int] = None,
    dtype: Any = None,
    device: DeviceLike = None,
    route: str = "auto",
    max_scratch_bytes: Optional[int] = None,
) -> Plan:
    """The plan heed.attention would run for these arguments: its kernel, scratch bytes and
    explanation. q, k, v are arrays (their shapes, dtype, strides and device are read) or
    shape tuples with `dtype` (default float32) and `device` (default: heed's default device,
    the CPU until a CUDA backend that can run is present). Invalid input
    raises what attention would. `scale` is accepted for symmetry; no plan depends on it.
    route, max_scratch_bytes: as for attention.
    """
    del scale
    causal = _flag(causal, "heed.plan", "causal")
    if not isinstance(route, str):
        raise TypeError(f"[heed.plan] route must be a str, got {type(route).__name__}")
    call = _Call("heed.plan")
    mask_in, sinks_in = call.prepare(mask, "mask"), call.prepare(sinks, "sinks")
    if isinstance(q, (tuple, list)) and isinstance(k, (tuple, list)) and isinstance(v, (tuple, list)):
        for name, shape in (("q", q), ("k", k), ("v", v)):
            if not all(isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) for dim in shape):
                raise TypeError(f"[heed.plan] {name} shape must hold integers, got {shape!r}")
        return _heed.plan_shapes([int(d) for d in q], [int(d) for d in k], [int(d) for d in v],
                                 _dtype_name(dtype if dtype is not None else "float32"), _device_name(device, "default"),
                                 mask_in, sinks_in, causal, window, softcap, max_score_bytes, call.bf16, route,
                                 max_scratch_bytes)
    if dtype is not None or device is not None:
        raise ValueError("[heed.plan] dtype and device are read from the arrays; pass them only with shapes")
    q_in, k_in, v_in = call.prepare(q, "q"), call.prepare(k, "k"), call.prepare(v, "v")
    return _heed.plan_views(q_in, k_in, v_in, mask_in, sinks_in, causal, window, softcap, max_score_bytes, call.bf16,
                            route, max_scratch_bytes)


def plan_varlen(
    q: SupportsDLPack,
    k: SupportsDLPack,
    v: SupportsDLPack,
    cu_seqlens_q: SupportsDLPack,
    cu_seqlens_k: SupportsDLPack,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    sinks: Optional[SupportsDLPack] = None,
    softcap: Optional[float] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    route: str = "auto",
    workspace: Optional[SupportsDLPack] = None,
    max_scratch_bytes: Optional[int] = None,
) -> Plan:
    """The plan attention_varlen would run for these arrays (shapes, dtype, strides, device and
    host-resident cu_seqlens are read). Invalid input raises what the call would. `scale` and
    `workspace` are accepted for symmetry; no plan depends on them.
    """
    del scale
    op = "heed.plan_varlen"
    causal = _flag(causal, op, "causal")
    _check_route_and_workspace(op, route, workspace)
    call = _Call(op)
    q_in, k_in, v_in = call.prepare(q, "q"), call.prepare(k, "k"), call.prepare(v, "v")
    cu_q_in, cu_k_in = call.prepare(cu_seqlens_q, "cu_seqlens_q"), call.prepare(cu_seqlens_k, "cu_seqlens_k")
    return _heed.plan_varlen(q_in, k_in, v_in, cu_q_in, cu_k_in, call.prepare(sinks, "sinks"), causal, window,
                             softcap, max_seqlen_q, max_seqlen_k, call.bf16, route, max_scratch_bytes)


def plan_paged(
    q: SupportsDLPack,
    k_cache: SupportsDLPack,
    v_cache: SupportsDLPack,
    block_table: SupportsDLPack,
    seqlens_k: SupportsDLPack,
    *,
    cu_seqlens_q: Optional[SupportsDLPack] = None,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    sinks: Optional[SupportsDLPack] = None,
    softcap: Optional[float] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    route: str = "auto",
    workspace: Optional[SupportsDLPack] = None,
    max_scratch_bytes: Optional[int] = None,
) -> Plan:
    """The plan attention_paged would run for these arrays; as plan_varlen."""
    del scale
    op = "heed.plan_paged"
    causal = _flag(causal, op, "causal")
    _check_route_and_workspace(op, route, workspace)
    call = _Call(op)
    q_in, k_in, v_in = call.prepare(q, "q"), call.prepare(k_cache, "k_cache"), call.prepare(v_cache, "v_cache")
    table_in, lengths_in = call.prepare(block_table, "block_table"), call.prepare(seqlens_k, "seqlens_k")
    return _heed.plan_paged(q_in, k_in, v_in, table_in, lengths_in, call.prepare(cu_seqlens_q, "cu_seqlens_q"),
                            call.prepare(sinks, "sinks"), causal, window, softcap, max_seqlen_q, max_seqlen_k,
                            call.bf16, route, max_scratch_bytes)


def memory_stats(device: DeviceLike = None) -> MemoryStats:
    """Bytes heed holds on the device: in use by calls now (`active`), the most in use since
    reset_peak (`peak`), and held for reuse by later calls (`cached`)."""
    return _heed.memory_stats(_device_name(device))


def reset_peak(device: DeviceLike = None) -> None:
    """Starts a new peak for memory_stats(device).peak."""
    _heed.reset_peak(_device_name(device))


def empty_cache(device: DeviceLike = None) -> int:
    """Returns what heed's caches hold on the device to the system (safe while other threads
    run calls); the bytes released."""
    return _heed.empty_cache(_device_name(device))


def cache_limit(device: DeviceLike = None) -> int:
    """The most bytes heed's caches may hold on the device (HEED_CACHE_BYTES, else on the CPU
    1 GiB or an eighth of memory if less, on CUDA no limit)."""
    return _heed.cache_limit(_device_name(device))


def set_cache_limit(bytes: int, device: DeviceLike = None) -> None:
    """Sets cache_limit(device); what the caches hold above it is released now."""
    if isinstance(bytes, bool) or not isinstance(bytes, int):
        raise TypeError(f"[heed.set_cache_limit] bytes must be an int, got {type(bytes).__name__}")
    if bytes < 0:
        raise ValueError(f"[heed.set_cache_limit] bytes must be at least 0, got {bytes}")
    _heed.set_cache_limit(bytes, _device_name(device))


# Last: the runners' module reads the helpers above.
from ._runner import Runner, runner, runner_paged, runner_varlen  # noqa: E402
