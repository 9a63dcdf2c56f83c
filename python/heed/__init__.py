"""heed: exact scaled-dot-product attention on CPUs and NVIDIA GPUs, planned and explained.

    import numpy as np, heed
    q = np.random.randn(1, 8, 128, 64).astype(np.float32)      # [B, Hq, Lq, D]
    k = np.random.randn(1, 2, 128, 64).astype(np.float32)      # [B, Hkv, Lk, D]
    v = np.random.randn(1, 2, 128, 64).astype(np.float32)      # [B, Hkv, Lk, Dv]
    out = heed.attention(q, k, v, causal=True)                 # numpy in, numpy out

Arrays of any library that speaks DLPack (numpy, PyTorch, CuPy, JAX), on the CPU or a CUDA
device, with any strides, are read in place; the result is an array of q's library on q's
device (or the caller's `out`). `heed.torch.attention` is the same call as a PyTorch custom op.
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

__all__ = ["attention", "plan", "memory_stats", "reset_peak", "empty_cache", "cache_limit", "set_cache_limit",
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
_BF16_BITS = {"q": 1, "k": 2, "v": 4, "out": 8, "mask": 16, "sinks": 32}


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


def _current_stream(array: Any, framework: str) -> int:
    """The caller's current CUDA stream for this array (0: the default stream)."""
    if framework == "torch":
        import torch

        return int(torch.cuda.current_stream(array.device).cuda_stream)
    if framework == "cupy":
        import cupy  # type: ignore[import-not-found]

        with array.device:
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


class _Call:
    """One call's arrays, made ready for the C++ module without copying any of them."""

    def __init__(self, op: str, stream_source: Any = None):
        self.op = op
        self.bf16 = 0
        self.stream = 0
        self.cuda = False
        if stream_source is not None and _has_dlpack(stream_source) and _is_cuda(stream_source):
            self.cuda = True
            self.stream = _current_stream(stream_source, _framework(stream_source))

    def prepare(self, array: Any, name: str) -> Any:
        if array is None and name in ("mask", "sinks"):
            return None
        if not _has_dlpack(array):
            raise TypeError(
                f"[{self.op}] {name} must be an array that supports DLPack (numpy, PyTorch, CuPy, JAX), "
                f"got {type(array).__module__}.{type(array).__qualname__}")
        framework = _framework(array)
        if framework == "numpy" and array.dtype.kind == "V" and array.dtype.name == "bfloat16" and name in _BF16_BITS:
            # numpy's DLPack export has no bfloat16: pass the same memory as uint16.
            self.bf16 |= _BF16_BITS[name]
            return array.view(np.uint16)
        if framework == "torch":
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


def _empty(like: Any, shape: Shape) -> Tuple[Any, Any]:
    """An uninitialised array of `like`'s library, dtype and device: (what to return, what heed writes)."""
    framework = _framework(like)
    out: Any
    if framework == "numpy":
        out = np.empty(shape, dtype=like.dtype)
        return out, out
    if framework == "torch":
        import torch

        out = torch.empty(shape, dtype=like.dtype, device=like.device)
        return out, out
    if framework == "cupy":
        import cupy  # type: ignore[import-not-found]

        with like.device:
            out = cupy.empty(shape, dtype=like.dtype)
        return out, out
    if framework == "jax":
        return _JaxResult(like, shape), None
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is not None:
        out = namespace().empty(shape, dtype=like.dtype, device=like.device)
        return out, out
    if not _is_cuda(like):
        out = np.empty(shape, dtype=np.dtype(str(like.dtype)))
        return out, out
    raise TypeError(f"[heed.attention] cannot allocate the result for q of type {type(like).__qualname__}; pass out=")


class _JaxResult:
    """JAX arrays are immutable: heed writes into a buffer of numpy (CPU) or of PyTorch or
    CuPy (CUDA) and JAX takes that buffer through DLPack."""

    def __init__(self, like: Any, shape: Shape):
        device = next(iter(like.devices()))
        self.buffer: Any
        if device.platform == "cpu":
            self.buffer = np.empty(shape, dtype=like.dtype)
        elif "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
            import torch

            dtype = getattr(torch, np.dtype(like.dtype).name)
            self.buffer = torch.empty(shape, dtype=dtype, device=f"cuda:{device.id}")
        elif importlib.util.find_spec("cupy") is not None:
            import cupy  # type: ignore[import-not-found]

            with cupy.cuda.Device(device.id):
                self.buffer = cupy.empty(shape, dtype=like.dtype)
        else:
            raise NotImplementedError("[heed.attention] JAX arrays on CUDA need PyTorch or CuPy to hold the result")

    def finish(self) -> Any:
        import jax.numpy as jnp  # type: ignore[import-not-found]

        if isinstance(self.buffer, np.ndarray) and self.buffer.dtype.kind == "V":
            return jnp.asarray(self.buffer)  # numpy's DLPack has no bfloat16: JAX copies the result
        return jnp.from_dlpack(self.buffer)


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
) -> ArrayT:
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
    Returns a new array of q's library on q's device, or `out` filled in place.
    On CUDA heed runs on the caller's current stream. Errors: ValueError (invalid input),
    TypeError (not an array), MemoryError, NotImplementedError (unsupported device or dtype).
    """
    causal = _flag(causal, "heed.attention", "causal")
    call = _Call("heed.attention", stream_source=q)
    q_in, k_in, v_in = call.prepare(q, "q"), call.prepare(k, "k"), call.prepare(v, "v")
    mask_in, sinks_in = call.prepare(mask, "mask"), call.prepare(sinks, "sinks")
    jax_result = None
    if out is None:
        shape = _out_shape(q, v)
        if shape is None:  # heed names the wrong rank
            _heed.plan_views(q_in, k_in, v_in, mask_in, sinks_in, causal, window, softcap, max_score_bytes, call.bf16,
                             route if isinstance(route, str) else "auto")
            raise ValueError("[heed.attention] q and v must have rank 4")
        result, target = _empty(q, shape)
        if isinstance(result, _JaxResult):
            jax_result, target = result, result.buffer
    else:
        if _framework(out) == "jax":
            raise ValueError("[heed.attention] out cannot be a JAX array: JAX arrays are immutable")
        result = target = out
    target_in = call.prepare(target, "out")
    if not isinstance(route, str):
        raise TypeError(f"[heed.attention] route must be a str, got {type(route).__name__}")
    if workspace is not None and not _has_dlpack(workspace):
        raise TypeError("[heed.attention] workspace must be an array that supports DLPack, got "
                        f"{type(workspace).__module__}.{type(workspace).__qualname__}")
    _heed.attention_into(q_in, k_in, v_in, target_in, mask_in, sinks_in, scale, causal, window, softcap,
                         max_score_bytes, call.stream, call.bf16, route, workspace, max_scratch_bytes)
    return jax_result.finish() if jax_result is not None else result


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
