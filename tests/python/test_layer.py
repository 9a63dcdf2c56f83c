"""heed.MultiHeadAttention against a float64 reference of the whole layer (numpy), with
padding (a fully padded sequence too), GQA and MQA, int masks as tokenizers give them, out=
and in place, the plan's workspace, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import heed
from reference import attention as reference_attention
from reference import assert_close


def make_layer(rng, hidden, q_heads, kv_heads, head_dim, biases=True):
    def weight(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    qw, kvw = q_heads * head_dim, kv_heads * head_dim
    w = {"q_weight": weight(qw, hidden), "k_weight": weight(kvw, hidden), "v_weight": weight(kvw, hidden),
         "out_weight": weight(hidden, qw)}
    if biases:
        for name, size in (("q_bias", qw), ("k_bias", kvw), ("v_bias", kvw), ("out_bias", hidden)):
            w[name] = (0.5 * rng.standard_normal(size)).astype(np.float32)
    return w


def reference_layer(x, mask, w, q_heads, kv_heads, head_dim, stored=lambda values: values):
    """The layer in float64: projections, attention over the real keys, output projection,
    padded positions zero. Each stage's result (q, k, v, the heads' output) goes through
    `stored`, the rounding to the layer's dtype in which the layer keeps it (none: float32's
    rounding is below the tolerance)."""
    x = x.astype(np.float64)
    batch, length, hidden = x.shape

    def linear(values, name):
        y = values @ w[name + "_weight"].astype(np.float64).T
        return y + w[name + "_bias"] if name + "_bias" in w else y

    def heads(values, count):
        return values.reshape(batch, length, count, head_dim).transpose(0, 2, 1, 3)

    q, k, v = (heads(stored(linear(x, name)), count)
               for name, count in (("q", q_heads), ("k", kv_heads), ("v", kv_heads)))
    keys = None if mask is None else mask.astype(bool)[:, None, None, :]
    a = stored(reference_attention(q, k, v, 1.0 / np.sqrt(head_dim), mask=keys))
    y = linear(a.transpose(0, 2, 1, 3).reshape(batch, length, q_heads * head_dim), "out")
    return y if mask is None else np.where(mask.astype(bool)[:, :, None], y, 0.0)


CASES = [  # hidden, q_heads, kv_heads, head_dim, lengths (None: no mask), length
    (64, 4, 4, 16, [17, 5, 0], 17),
    (384, 12, 12, 32, [40, 9], 40),
    (40, 6, 2, 8, [7, 129], 129),
    (9, 4, 1, 7, [1, 7, 3], 7),
    (32, 2, 1, 16, None, 19),
]


@pytest.mark.parametrize("hidden,q_heads,kv_heads,head_dim,lengths,length", CASES)
def test_layer_matches_float64_reference(hidden, q_heads, kv_heads, head_dim, lengths, length):
    rng = np.random.default_rng(hidden * 1000 + length)
    w = make_layer(rng, hidden, q_heads, kv_heads, head_dim)
    batch = 2 if lengths is None else len(lengths)
    x = rng.standard_normal((batch, length, hidden)).astype(np.float32)
    mask = None if lengths is None else (np.arange(length)[None, :] < np.array(lengths)[:, None])
    layer = heed.MultiHeadAttention(q_heads=q_heads, kv_heads=kv_heads, **w)
    got = layer(x, mask)
    expected = reference_layer(x, mask, w, q_heads, kv_heads, head_dim)
    assert got.shape == x.shape and got.dtype == np.float32
    assert_close(got.reshape(batch, length, 1, hidden), expected.reshape(batch, length, 1, hidden), "float32")


def test_int_masks_out_and_in_place():
    rng = np.random.default_rng(3)
    w = make_layer(rng, 48, 4, 2, 12, biases=False)
    layer = heed.MultiHeadAttention(q_heads=4, kv_heads=2, **w)
    x = rng.standard_normal((3, 10, 48)).astype(np.float32)
    int_mask = (np.arange(10)[None, :] < np.array([[10], [4], [1]])).astype(np.int64)
    expected = reference_layer(x, int_mask, w, 4, 2, 12)
    first = layer(x, int_mask)
    assert_close(first.reshape(3, 10, 1, 48), expected.reshape(3, 10, 1, 48), "float32")
    out = np.full_like(x, np.nan)
    assert layer(x, int_mask.astype(bool), out=out) is out
    np.testing.assert_array_equal(out, first)
    assert layer(x, int_mask, out=x) is x  # in place: the hidden states are read before out is written
    np.testing.assert_array_equal(x, first)


def test_plan_states_the_workspace():
    rng = np.random.default_rng(5)
    layer = heed.MultiHeadAttention(q_heads=12, **make_layer(rng, 384, 12, 12, 32))
    plan = layer.plan(32, 128)
    names = [b["name"] for b in plan.buffers]
    assert names == ["q", "k", "v", "heads_out", "attention"]
    assert plan.workspace_bytes >= 4 * 32 * 128 * 384 * 4 + plan.attention.scratch_bytes
    assert "workspace" in plan.explain() and plan.attention.explain() in plan.explain()
    assert layer.scale == pytest.approx(1 / np.sqrt(32))
    heed.reset_peak()
    before = heed.memory_stats().active
    layer(rng.standard_normal((32, 128, 384)).astype(np.float32), np.ones((32, 128), bool))
    assert heed.memory_stats().peak - before <= plan.workspace_bytes + 64


def test_errors_name_the_layer_and_the_values():
    rng = np.random.default_rng(7)
    w = make_layer(rng, 32, 4, 2, 8)
    with pytest.raises(ValueError, match=r"\[heed::MultiHeadAttention\] q_heads \(4\) must be a multiple of kv_heads \(3\)"):
        heed.MultiHeadAttention(q_heads=4, kv_heads=3, head_dim=8, **w)
    with pytest.raises(ValueError, match=r"q_weight has dtype float64"):
        heed.MultiHeadAttention(q_heads=4, kv_heads=2, **{**w, "q_weight": w["q_weight"].astype(np.float64)})
    with pytest.raises(NotImplementedError, match=r"q_weight has dtype float16; the layer runs in float32 on the CPU"):
        heed.MultiHeadAttention(q_heads=4, kv_heads=2, **{name: a.astype(np.float16) for name, a in w.items()})
    with pytest.raises(ValueError, match=r"k_weight has dtype float16 but the layer's weights have float32"):
        heed.MultiHeadAttention(q_heads=4, kv_heads=2, **{**w, "k_weight": w["k_weight"].astype(np.float16)})
    layer = heed.MultiHeadAttention(q_heads=4, kv_heads=2, **w)
    x = rng.standard_normal((2, 5, 32)).astype(np.float32)
    out = np.full_like(x, 7.0)
    with pytest.raises(ValueError, match=r"key_padding_mask shape \[2, 4\] must be \[2, 5\]"):
        layer(x, np.ones((2, 4), bool), out=out)
    with pytest.raises(ValueError, match=r"hidden shape \[2, 5, 31\] must be \[batch, length, 32\]"):
        layer(np.zeros((2, 5, 31), np.float32))
    assert (out == 7.0).all()


def test_torch_tensors_when_installed():
    torch = pytest.importorskip("torch", reason="PyTorch is not importable here")
    rng = np.random.default_rng(11)
    w = make_layer(rng, 32, 4, 1, 8)
    layer = heed.MultiHeadAttention(q_heads=4, kv_heads=1, **{k: torch.from_numpy(v) for k, v in w.items()})
    x = rng.standard_normal((2, 6, 32)).astype(np.float32)
    mask = np.array([[1] * 6, [1, 1, 0, 0, 0, 0]])
    got = layer(torch.from_numpy(x), torch.from_numpy(mask))
    assert isinstance(got, torch.Tensor)
    expected = reference_layer(x, mask, w, 4, 1, 8)
    assert_close(got.numpy().reshape(2, 6, 1, 32), expected.reshape(2, 6, 1, 32), "float32")


def test_empty_batch_or_length_gives_the_empty_output():
    """B = 0 or L = 0 gives the empty output, as heed.attention does (numpy's empty arrays may
    carry zero strides), with or without a mask and out=."""
    rng = np.random.default_rng(13)
    layer = heed.MultiHeadAttention(q_heads=4, kv_heads=2, **make_layer(rng, 32, 4, 2, 8))
    for shape in ((0, 5, 32), (3, 0, 32), (0, 0, 32)):
        x = np.zeros(shape, np.float32)
        y = layer(x)
        assert y.shape == shape and y.dtype == np.float32
        assert layer(x, np.ones(shape[:2], bool)).shape == shape
        out = np.empty(shape, np.float32)
        assert layer(x, np.ones(shape[:2], np.int64), out=out) is out
        assert layer.plan(shape[0], shape[1]).workspace_bytes == 0


def test_wrong_python_types_are_type_errors():
    """What is no array is TypeError, naming the argument (README); an array of the wrong shape
    is ValueError."""
    rng = np.random.default_rng(17)
    w = make_layer(rng, 32, 4, 2, 8)
    for name in ("q_weight", "k_weight", "v_weight", "out_weight", "q_bias", "out_bias"):
        for bad in ([[1.0]], "w") + ((None,) if name.endswith("weight") else ()):
            with pytest.raises(TypeError, match=rf"\[heed\.MultiHeadAttention\] {name} must be an array"):
                heed.MultiHeadAttention(q_heads=4, kv_heads=2, **{**w, name: bad})
    for name in ("q_weight", "out_weight"):
        for bad in (np.array(1.0, np.float32), np.zeros(32, np.float32)):
            with pytest.raises(ValueError, match=rf"\[heed\.MultiHeadAttention\] {name} must have rank 2"):
                heed.MultiHeadAttention(q_heads=4, kv_heads=2, **{**w, name: bad})
    layer = heed.MultiHeadAttention(q_heads=4, kv_heads=2, **w)
    x = rng.standard_normal((2, 5, 32)).astype(np.float32)
    with pytest.raises(TypeError, match=r"hidden must be an array .* got builtins\.list"):
        layer(x.tolist())
    with pytest.raises(TypeError, match=r"hidden must be an array"):
        layer(None)
    with pytest.raises(TypeError, match=r"key_padding_mask must be an array"):
        layer(x, [[True] * 5] * 2)
    with pytest.raises(TypeError, match=r"out must be an array"):
        layer(x, out=[0.0])


def test_torch_empty_and_meta_when_installed():
    torch = pytest.importorskip("torch", reason="PyTorch is not importable here")
    rng = np.random.default_rng(19)
    w = {k: torch.from_numpy(v) for k, v in make_layer(rng, 32, 4, 2, 8).items()}
    layer = heed.MultiHeadAttention(q_heads=4, kv_heads=2, **w)
    assert layer(torch.zeros(0, 5, 32)).shape == (0, 5, 32)
    assert layer(torch.zeros(3, 0, 32), torch.ones(3, 0, dtype=torch.bool)).shape == (3, 0, 32)
    with pytest.raises(NotImplementedError, match=r"hidden .*heed runs on cpu and cuda"):
        layer(torch.zeros(2, 5, 32, device="meta"))
    with pytest.raises(NotImplementedError, match=r"q_weight .*heed runs on cpu and cuda"):
        heed.MultiHeadAttention(q_heads=4, kv_heads=2, **{**w, "q_weight": w["q_weight"].to("meta")})
