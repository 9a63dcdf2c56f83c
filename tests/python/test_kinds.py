"""Each input kind returns its own kind, in place (no copy of any input), on its device."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest

import heed
import reference
from conftest import BFLOAT16, in_layout, random, torch_or_skip
from test_grid import CASES, call_kwargs, make_inputs


def data_pointer(array) -> int:
    if isinstance(array, np.ndarray):
        return array.__array_interface__["data"][0]
    return array.data_ptr()  # torch


def test_newcomer_snippet():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 8, 128, 64)).astype(np.float32)
    k = rng.standard_normal((1, 2, 128, 64)).astype(np.float32)
    v = rng.standard_normal((1, 2, 128, 64)).astype(np.float32)
    out = heed.attention(q, k, v, causal=True)
    assert isinstance(out, np.ndarray) and out.shape == (1, 8, 128, 64) and out.dtype == np.float32
    reference.assert_close(out, reference.attention(q, k, v, 1 / 8, causal=True), "float32")


@pytest.mark.parametrize("layout", ["contiguous", "blhd", "strided_last", "reversed", "padded"])
def test_numpy_views_are_read_in_place(layout):
    """The binding sees the arrays' own data pointers, whatever their strides."""
    rng = np.random.default_rng(1)
    q, k, v = (in_layout(random(rng, shape, np.float32), layout)
               for shape in ((2, 4, 9, 32), (2, 2, 11, 32), (2, 2, 11, 16)))
    mask = rng.random((2, 1, 1, 11)) < 0.8
    sinks = random(rng, (4,), np.float32)
    out = in_layout(np.zeros((2, 4, 9, 16), np.float32), layout)
    result = heed.attention(q, k, v, mask=mask, sinks=sinks, out=out)
    seen = heed._heed.last_call()
    assert result is out
    for name, array in (("q", q), ("k", k), ("v", v), ("out", out), ("mask", mask), ("sinks", sinks)):
        assert seen[name] == data_pointer(array), name
    assert seen["device"] == "cpu"
    reference.assert_close(out, reference.attention(q, k, v, 32 ** -0.5, mask=mask, sinks=sinks), "float32")


def test_numpy_inputs_are_not_copied():
    """No input-sized allocation happens during a call (numpy's allocations are traced)."""
    rng = np.random.default_rng(2)
    q = random(rng, (1, 8, 256, 256), np.float32)   # 2 MiB each; the output is 64 KiB
    k = random(rng, (1, 8, 256, 256), np.float32).transpose(0, 2, 1, 3).copy().transpose(0, 2, 1, 3)
    v = random(rng, (1, 8, 256, 8), np.float32)
    heed.attention(q, k, v)  # warm-up: first-use allocations are not the call's
    tracemalloc.start()
    try:
        out = heed.attention(q, k, v, causal=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < out.nbytes + q.nbytes // 8, f"{peak} bytes traced for a {out.nbytes}-byte output"


def test_read_only_and_broadcast_inputs():
    """Read-only arrays and zero strides (np.broadcast_to) are read in place."""
    rng = np.random.default_rng(3)
    q = random(rng, (3, 4, 5, 16), np.float32)
    q.flags.writeable = False
    k = np.broadcast_to(random(rng, (1, 2, 7, 16), np.float32), (3, 2, 7, 16))
    v = np.broadcast_to(random(rng, (1, 2, 7, 16), np.float32), (3, 2, 7, 16))
    out = heed.attention(q, k, v)
    assert heed._heed.last_call()["k"] == data_pointer(k)
    reference.assert_close(out, reference.attention(q, k, v, 0.25), "float32")


@pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not importable")
def test_numpy_bfloat16_through_ml_dtypes():
    rng = np.random.default_rng(4)
    q, k, v = (random(rng, shape, BFLOAT16) for shape in ((1, 4, 6, 64), (1, 2, 9, 64), (1, 2, 9, 64)))
    out = heed.attention(q, k, v, causal=True)
    assert out.dtype == BFLOAT16
    assert heed._heed.last_call()["q"] == data_pointer(q)
    reference.assert_close(out.astype(np.float64), reference.attention(q, k, v, 1 / 8, causal=True), "bfloat16")


def test_calls_from_threads_agree():
    """The GIL is released during the call; concurrent calls give the serial results."""
    (q, k, v), mask, sinks, _ = make_inputs(CASES[3])
    expected = heed.attention(q, k, v)
    results = [None] * 4

    def run(index):
        results[index] = heed.attention(q, k, v)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        np.testing.assert_array_equal(result, expected)


# --- PyTorch (skipped, with the reason, only where torch is not importable) ---


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_in_torch_out(dtype):
    torch = torch_or_skip()
    case = next(c for c in CASES if c.name == "gqa_prefill_causal")
    (q, k, v), mask, sinks, _ = make_inputs(case)
    tq, tk, tv = (torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype)) for x in (q, k, v))
    tk = tk.transpose(1, 2).contiguous().transpose(1, 2)  # [B, L, H, D] storage
    result = heed.attention(tq, tk, tv, causal=True)
    assert isinstance(result, torch.Tensor) and result.dtype == tq.dtype and result.device == tq.device
    seen = heed._heed.last_call()
    assert (seen["q"], seen["k"], seen["v"], seen["out"]) == tuple(t.data_ptr() for t in (tq, tk, tv, result))
    expected = reference.attention(*(t.float().numpy() for t in (tq, tk, tv)), 1 / 8, causal=True)
    reference.assert_close(result.float().numpy(), expected, dtype)


def test_torch_out_mask_sinks_and_grad():
    torch = torch_or_skip()
    rng = np.random.default_rng(5)
    q = torch.tensor(random(rng, (2, 4, 7, 32), np.float32), requires_grad=True)
    k, v = (torch.tensor(random(rng, (2, 2, 12, 32), np.float32)) for _ in range(2))
    mask = torch.rand(2, 1, 1, 12, generator=torch.Generator().manual_seed(0)) < 0.7
    mask[1] = False  # batch 1 sees no key: zeros
    sinks = torch.randn(4)
    out = torch.full((2, 7, 4, 32), float("nan")).transpose(1, 2)
    result = heed.attention(q, k, v, mask=mask, sinks=sinks, out=out)
    assert result is out and heed._heed.last_call()["out"] == out.data_ptr()
    expected = reference.attention(q.detach().numpy(), k.numpy(), v.numpy(), 32 ** -0.5, mask=mask.numpy(),
                                   sinks=sinks.numpy())
    reference.assert_close(out.numpy(), expected, "float32")
    assert (out[1] == 0).all()


def test_torch_tensors_are_read_directly():
    """Exact torch.Tensors skip DLPack (their pointers, strides and offsets read directly); a
    subclass and a float64 tensor take DLPack's path with its results and errors; a negative view,
    whose memory DLPack would hand out un-negated, is refused."""
    torch = torch_or_skip()
    rng = np.random.default_rng(8)
    base = torch.tensor(random(rng, (3, 4, 9, 32), np.float32))
    q = base[1:, :, 2:]  # a storage offset and strides of a larger tensor
    k = torch.tensor(random(rng, (2, 12, 2, 32), np.float32)).transpose(1, 2)  # [B, L, H, D] storage
    v = torch.tensor(random(rng, (2, 2, 12, 32), np.float32))
    out = torch.full((2, 7, 4, 32), float("nan")).transpose(1, 2)
    heed.attention(q, k, v, causal=True, out=out)
    seen = heed._heed.last_call()
    assert (seen["q"], seen["k"], seen["v"], seen["out"]) == tuple(t.data_ptr() for t in (q, k, v, out))
    expected = reference.attention(q.numpy(), k.numpy(), v.numpy(), 32 ** -0.5, causal=True)
    reference.assert_close(out.numpy(), expected, "float32")

    class Sub(torch.Tensor):
        pass

    through_dlpack = heed.attention(q.as_subclass(Sub), k.as_subclass(Sub), v, causal=True)
    assert torch.equal(torch.Tensor(through_dlpack), out)
    with pytest.raises(ValueError, match=r"^\[heed.attention\] k is a negative view"):
        heed.attention(q, torch._neg_view(k), v)  # its memory holds k, not -k
    with pytest.raises(ValueError, match=r"^\[heed.attention\] q has dtype float64; heed takes float32"):
        heed.attention(q.double(), k, v)
    with pytest.raises(ValueError, match=r"cu_seqlens_q has dtype int64; heed takes int32"):
        rows = torch.zeros(5, 4, 32)
        heed.attention_varlen(rows, rows[:, :2], rows[:, :2], torch.tensor([0, 5]), torch.tensor([0, 5], dtype=torch.int32))


def test_torch_wrappers_skip_the_dispatcher_only_where_it_adds_nothing(monkeypatch):
    """heed.torch.attention calls heed directly in plain eager mode, and the custom op wherever
    the dispatcher has work: a torch function mode, autograd recording, keywords the op lacks."""
    torch = torch_or_skip()
    import heed.torch as heed_torch
    from torch.overrides import TorchFunctionMode

    dispatched = []
    op = heed_torch._attention

    def spy(*args, **kwargs):
        dispatched.append(True)
        return op(*args, **kwargs)

    monkeypatch.setattr(heed_torch, "_attention", spy)
    rng = np.random.default_rng(9)
    q, k, v = (torch.tensor(random(rng, (1, 4, 3, 32), np.float32)) for _ in range(3))
    expected = heed.attention(q, k, v, causal=True)
    assert torch.equal(heed_torch.attention(q, k, v, causal=True), expected) and not dispatched

    class Passing(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passing():
        assert torch.equal(heed_torch.attention(q, k, v, causal=True), expected)
    assert len(dispatched) == 1
    q_grad = q.clone().requires_grad_()
    assert torch.equal(heed_torch.attention(q_grad, k, v, causal=True).detach(), expected) and len(dispatched) == 2
    with torch.no_grad():
        assert torch.equal(heed_torch.attention(q_grad, k, v, causal=True), expected) and len(dispatched) == 2
    with pytest.raises(RuntimeError, match="Unknown keyword argument 'route'"):
        heed_torch.attention(q, k, v, route="tiled")  # the op has no route; neither has its wrapper
    assert len(dispatched) == 3


def test_torch_custom_op_under_compile():
    torch = torch_or_skip()
    import heed.torch as heed_torch

    rng = np.random.default_rng(6)
    q = torch.tensor(random(rng, (1, 8, 5, 64), np.float32))
    k, v = (torch.tensor(random(rng, (1, 2, 40, 64), np.float32)) for _ in range(2))
    sinks = torch.randn(8)
    eager = heed.attention(q, k, v, causal=True, sinks=sinks, window=8)
    op = heed_torch.attention(q, k, v, causal=True, sinks=sinks, window=8)
    assert torch.equal(op, eager)
    assert torch.ops.heed.attention.default is not None
    torch.library.opcheck(torch.ops.heed.attention.default, (q, k, v), {"sinks": sinks, "causal": True, "window": 8})

    def layer(q, k, v, sinks):
        return heed_torch.attention(q * 2, k, v, causal=True, sinks=sinks, window=8) + 1

    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break fails
    torch.testing.assert_close(compiled(q, k, v, sinks), layer(q, k, v, sinks), rtol=0, atol=0)
    explanation = torch._dynamo.explain(layer)(q, k, v, sinks)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


# --- JAX (best effort: the test command does not install it) ---


def test_jax_in_jax_out():
    jax = pytest.importorskip("jax", reason="JAX is not importable here")
    import jax.numpy as jnp

    rng = np.random.default_rng(7)
    qn, kn = random(rng, (1, 4, 5, 16), np.float32), random(rng, (1, 2, 7, 16), np.float32)
    cpu = jax.devices("cpu")[0]  # JAX on a GPU machine would place arrays on the GPU
    q, k, sinks = (jax.device_put(x, cpu) for x in (qn, kn, np.zeros(4, np.float32)))
    result = heed.attention(q, k, k, causal=True, sinks=sinks)
    assert isinstance(result, jax.Array) and result.dtype == jnp.float32
    assert heed._heed.last_call()["q"] == q.unsafe_buffer_pointer()
    expected = reference.attention(qn, kn, kn, 0.25, causal=True, sinks=np.zeros(4))
    reference.assert_close(np.asarray(result), expected, "float32")
    as_bf16 = heed.attention(q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), k.astype(jnp.bfloat16))
    assert isinstance(as_bf16, jax.Array) and as_bf16.dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="immutable"):
        heed.attention(q, k, k, out=q)
