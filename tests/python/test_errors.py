"""Every invalid input raises the right Python exception with heed's message, before any
work: nothing is written to `out`, and no input crashes the process."""

from __future__ import annotations

import numpy as np
import pytest

import heed
from conftest import torch_or_skip

F32 = np.float32


def arrays(q_shape=(1, 4, 5, 16), kv_shape=(1, 2, 7, 16), dtype=F32):
    rng = np.random.default_rng(0)
    return (rng.standard_normal(q_shape).astype(dtype), rng.standard_normal(kv_shape).astype(dtype),
            rng.standard_normal(kv_shape).astype(dtype))


Q, K, V = arrays()

# (id, call, exception, text the message must contain)
VALUE_ERRORS = [
    ("rank_3_q", lambda: heed.attention(Q[0], K, V), "q must have rank 4"),
    ("zero_d_array", lambda: heed.attention(np.array(1.0, F32), K, V), "rank 4"),
    ("heads", lambda: heed.attention(*arrays((1, 3, 5, 16))), "Hq (3) must be a multiple of Hkv (2)"),
    ("batch", lambda: heed.attention(*arrays((2, 4, 5, 16))), "batch sizes differ"),
    ("head_dim", lambda: heed.attention(*arrays((1, 4, 5, 8))), "head sizes differ"),
    ("kv_len", lambda: heed.attention(Q, K, V[:, :, :3]), "k and v lengths differ"),
    ("float64", lambda: heed.attention(*arrays(dtype=np.float64)), "float64"),
    ("int32", lambda: heed.attention(*arrays(dtype=np.int32)), "int32"),
    ("mixed_dtypes", lambda: heed.attention(Q, K.astype(np.float16), V), "share one dtype"),
    ("mask_shape", lambda: heed.attention(Q, K, V, mask=np.ones((5, 6), bool)), "does not broadcast"),
    ("mask_rank", lambda: heed.attention(Q, K, V, mask=np.ones(7, bool)), "rank 2"),
    ("mask_uint8", lambda: heed.attention(Q, K, V, mask=np.ones((5, 7), np.uint8)), "uint8"),
    ("sinks_shape", lambda: heed.attention(Q, K, V, sinks=np.zeros(2, F32)), "sinks must have shape [Hq] = [4]"),
    ("sinks_bool", lambda: heed.attention(Q, K, V, sinks=np.zeros(4, bool)), "sinks dtype"),
    ("window_without_causal", lambda: heed.attention(Q, K, V, window=3), "window (3) requires causal"),
    ("window_zero", lambda: heed.attention(Q, K, V, causal=True, window=0), "window must be >= 1"),
    ("cap_zero", lambda: heed.attention(Q, K, V, max_score_bytes=0), "max_score_bytes must be > 0"),
    ("cap_negative", lambda: heed.attention(Q, K, V, max_score_bytes=-5), "max_score_bytes must be > 0"),
    ("cap_too_small", lambda: heed.attention(Q, K, V, max_score_bytes=1), "max_score_bytes"),
    ("scale_nan", lambda: heed.attention(Q, K, V, scale=float("nan")), "scale must be finite"),
    ("scale_inf", lambda: heed.attention(Q, K, V, scale=1e300), "scale must be finite"),
    ("out_shape", lambda: heed.attention(Q, K, V, out=np.empty((1, 4, 5, 8), F32)), "out shape [1, 4, 5, 8]"),
    ("out_dtype", lambda: heed.attention(Q, K, V, out=np.empty((1, 4, 5, 16), np.float16)), "out dtype"),
    ("out_float64", lambda: heed.attention(Q, K, V, out=np.empty((1, 4, 5, 16))), "out has dtype float64"),
    ("out_read_only", lambda: heed.attention(Q, K, V, out=np.broadcast_to(np.empty(16, F32), (1, 4, 5, 16))),
     "out is read-only"),
    ("out_is_q", lambda: heed.attention(Q, K, V, out=Q), "out overlaps q"),
    ("out_overlaps_v", lambda: heed.attention(Q[:, :2], K, V, out=V[:, :, :5]), "out overlaps v"),
    ("strides_not_whole_elements",
     lambda: heed.attention(np.ndarray((1, 4, 5, 16), F32, np.zeros(2000, np.uint8), 1, (1280, 320, 65, 4)), K, V),
     "cannot be read through DLPack"),
    ("shape_overflow", lambda: heed.plan((1 << 40, 1 << 20, 1 << 20, 64), (1 << 40, 1, 1, 64), (1 << 40, 1, 1, 64)),
     "overflows"),
    ("negative_size", lambda: heed.plan((1, 1, -1, 64), (1, 1, 1, 64), (1, 1, 1, 64)), "negative"),
    ("plan_dtype", lambda: heed.plan((1, 1, 1, 64), (1, 1, 1, 64), (1, 1, 1, 64), dtype="float64"), "dtype"),
    ("plan_device", lambda: heed.plan((1, 1, 1, 64), (1, 1, 1, 64), (1, 1, 1, 64), device="tpu"), "device"),
    ("plan_arrays_with_dtype", lambda: heed.plan(Q, K, V, dtype="float16"), "dtype and device"),
    ("memory_stats_device", lambda: heed.memory_stats("gpu"), "device"),
    ("profile_mode", lambda: heed.profile.set_mode("everything"), "mode must be"),
]

TYPE_ERRORS = [
    ("q_none", lambda: heed.attention(None, K, V), "q must be an array"),
    ("numpy_scalar", lambda: heed.attention(np.float32(1.0), K, V), "got numpy.float32"),
    ("q_list", lambda: heed.attention(Q.tolist(), K, V), "got builtins.list"),
    ("k_string", lambda: heed.attention(Q, "k", V), "k must be an array"),
    ("mask_list", lambda: heed.attention(Q, K, V, mask=[[True]]), "mask must be an array"),
    ("out_dict", lambda: heed.attention(Q, K, V, out={}), "out must be an array"),
    ("window_float", lambda: heed.attention(Q, K, V, causal=True, window=2.5), ""),
    ("causal_string", lambda: heed.attention(Q, K, V, causal="yes"), ""),
    ("scale_string", lambda: heed.attention(Q, K, V, scale="0.1"), ""),
    ("plan_shape_floats", lambda: heed.plan((1, 1, 1.5, 64), (1, 1, 1, 64), (1, 1, 1, 64)), "integers"),
    ("positional_options", lambda: heed.attention(Q, K, V, None), "positional"),
]

NOT_IMPLEMENTED = [
    # cuda:1: absent without a GPU and on the one-GPU H200 machine alike.
    ("plan_cuda", lambda: heed.plan((1, 1, 1, 64), (1, 1, 1, 64), (1, 1, 1, 64), device="cuda:1"), "cuda:1"),
    ("memory_stats_cuda", lambda: heed.memory_stats("cuda:1"), "cuda:1"),
]


def check(call, exception, text):
    with pytest.raises(exception) as info:
        call()
    assert text in str(info.value), str(info.value)
    return str(info.value)


@pytest.mark.parametrize("call,text", [c[1:] for c in VALUE_ERRORS], ids=[c[0] for c in VALUE_ERRORS])
def test_value_errors(call, text):
    message = check(call, ValueError, text)
    assert message.startswith("[heed"), message


@pytest.mark.parametrize("call,text", [c[1:] for c in TYPE_ERRORS], ids=[c[0] for c in TYPE_ERRORS])
def test_type_errors(call, text):
    check(call, TypeError, text)


@pytest.mark.parametrize("call,text", [c[1:] for c in NOT_IMPLEMENTED], ids=[c[0] for c in NOT_IMPLEMENTED])
def test_not_implemented(call, text):
    check(call, NotImplementedError, text)


def test_smallest_cap_is_named():
    message = check(lambda: heed.attention(Q, K, V, max_score_bytes=1), ValueError, "max_score_bytes")
    assert any(char.isdigit() for char in message.split("max_score_bytes", 1)[1])


def test_nothing_written_on_error():
    out = np.full((1, 4, 5, 16), 7.0, F32)
    with pytest.raises(ValueError):
        heed.attention(Q, K, V, out=out, window=2)
    with pytest.raises(ValueError):
        heed.attention(Q, K, V, out=out, mask=np.ones((5, 6), bool))
    assert (out == 7.0).all()


def test_scratch_that_cannot_be_allocated_is_memory_error():
    """Zero-stride inputs of a huge head size cost no memory; their 3 TB of tile scratch
    cannot be allocated: MemoryError with heed's message, no crash."""
    head_dim = 1 << 34
    zero = np.zeros(1, F32)
    q = np.broadcast_to(zero, (1, 1, 17, head_dim))
    v = np.broadcast_to(zero, (1, 1, 17, 1))
    assert heed.plan(q, q, v).scratch_bytes > 1 << 40
    check(lambda: heed.attention(q, q, v), MemoryError, "could not allocate")


def test_torch_invalid_inputs():
    torch = torch_or_skip()
    q, k, v = (torch.from_numpy(x) for x in (Q, K, V))
    check(lambda: heed.attention(q, k.double(), v), ValueError, "float64")
    check(lambda: heed.attention(q, k, v, mask=torch.ones(5, 7, dtype=torch.int64)), ValueError, "int64")
    check(lambda: heed.attention(q[0], k, v), ValueError, "rank 4")
    import heed.torch as heed_torch

    check(lambda: heed_torch.attention(q, k, v, window=3), ValueError, "requires causal")
    check(lambda: heed.attention(q, k, v, out=torch.empty(1, 4, 5, 16, dtype=torch.float16)), ValueError,
          "out dtype")


BAD_VALUES = [None, 1, 1.5, "x", [], {}, object(), np.array(1.0, F32), np.zeros(0, F32), np.zeros((2, 3), F32),
              np.zeros((1, 4, 5, 16, 1), F32), np.zeros((1, 4, 5, 16), np.complex64), np.zeros((1, 4, 5, 16), np.int8),
              np.zeros((1, 4, 5, 16), [("a", F32)]), np.zeros((1, 4, 5, 16), np.float64),
              np.zeros((1, 4, 5, 16), np.uint16), np.zeros((1, 4, 5, 16), np.float16)[..., ::-3],
              np.zeros((1, 4, 5, 16), bool), np.zeros((4,), np.float16), np.frombuffer(b"\0" * 64, F32)]


# The values of BAD_VALUES that are valid for an argument: scales (a 0-d array too), a window
# of 1, float16 sinks of [Hq].
VALID = [("scale", 1), ("scale", 1.5), ("scale", BAD_VALUES[7]), ("window", 1), ("sinks", BAD_VALUES[-2])]


@pytest.mark.parametrize("argument", ["q", "k", "v", "mask", "sinks", "out", "scale", "window", "max_score_bytes"])
def test_no_crash_on_any_input(argument):
    """Every odd value in every position raises ValueError, TypeError or NotImplementedError."""
    for value in BAD_VALUES:
        if value is None and argument not in ("q", "k", "v"):
            continue  # None means "not given" there
        if any(argument == name and value is valid for name, valid in VALID):
            continue
        kwargs = {"q": Q, "k": K, "v": V, "causal": True}
        kwargs[argument] = value
        q, k, v = kwargs.pop("q"), kwargs.pop("k"), kwargs.pop("v")
        with pytest.raises((ValueError, TypeError, NotImplementedError)):
            heed.attention(q, k, v, **kwargs)
        if argument not in ("out", "scale"):  # the plan reads neither
            with pytest.raises((ValueError, TypeError, NotImplementedError)):
                heed.plan(q, k, v, **kwargs)


def test_numpy_bool_is_a_flag():
    """causal takes numpy's bool as Python's (a comparison's result); other types stay TypeError."""
    expected = heed.attention(Q, K, V, causal=True)
    np.testing.assert_array_equal(heed.attention(Q, K, V, causal=np.bool_(True)), expected)
    np.testing.assert_array_equal(heed.attention(Q, K, V, causal=np.bool_(False)), heed.attention(Q, K, V))
    assert heed.plan(Q, K, V, causal=np.bool_(True)) == heed.plan(Q, K, V, causal=True)
    assert heed.plan(Q.shape, K.shape, V.shape, causal=np.bool_(True)) == heed.plan(Q.shape, K.shape, V.shape,
                                                                                     causal=True)
    check(lambda: heed.attention(Q, K, V, causal=1), TypeError, "[heed.attention] causal must be a bool, got builtins.int")
    check(lambda: heed.plan(Q, K, V, causal=None), TypeError, "[heed.plan] causal must be a bool")


class _Unexportable:
    """An array whose DLPack export fails as PyTorch's does for meta tensors (no DLPack device at
    all) or for sparse ones (a CPU device, but no strided export)."""

    def __init__(self, device_error: bool):
        self.device_error = device_error
        self.shape, self.dtype = (1, 4, 5, 16), np.dtype(F32)

    def __dlpack_device__(self):
        if self.device_error:
            raise ValueError("Unknown device type meta for Dlpack")
        return (1, 0)

    def __dlpack__(self, *args, **kwargs):
        raise BufferError("Can't export tensors with layout other than torch.strided")


@pytest.mark.parametrize("position", ["q", "k", "mask"])
def test_unexportable_arrays(position):
    """A device DLPack cannot name is NotImplementedError; an export that fails is ValueError
    with the producer's reason and no traceback, in any position, for attention and plan."""
    for device_error, exception, text in ((True, NotImplementedError, "Unknown device type meta for Dlpack"),
                                          (False, ValueError, "Can't export tensors with layout other than")):
        kwargs = {"q": Q, "k": K, "v": V, position: _Unexportable(device_error)}
        for call in (heed.attention, heed.plan):
            with pytest.raises(exception) as info:
                call(**kwargs)
            message = str(info.value)
            assert message.startswith(f"[{call.__module__}.{call.__name__}] {position} "), message
            assert text in message and "Traceback" not in message and "\n" not in message, message


def test_torch_meta_and_sparse_tensors():
    torch = torch_or_skip()
    q, k, v = (torch.from_numpy(x) for x in (Q, K, V))
    for args in ((q.to("meta"), k, v), (q, k.to("meta"), v)):
        message = check(lambda: heed.attention(*args), NotImplementedError, "heed runs on cpu and cuda")
        assert "Traceback" not in message, message
        check(lambda: heed.plan(*args), NotImplementedError, "heed runs on cpu and cuda")
    for args in ((q.to_sparse(), k, v), (q, k.to_sparse(), v)):
        message = check(lambda: heed.attention(*args), ValueError, "cannot be read through DLPack")
        assert "Traceback" not in message and "\n" not in message, message
