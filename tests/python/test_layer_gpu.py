"""heed.MultiHeadAttention on PyTorch CUDA tensors: float32, float16 and bfloat16 against the
float64 reference of the whole layer (padding, a fully padded sequence, GQA, MQA), CUDA
tensors out, zero copy on the caller's stream, the plan's workspace on the device, the
profiler's names, errors, and PyTorch's own nn.MultiheadAttention on the same weights. Runs
where torch.cuda.is_available() (the H200 through scripts/gpu-check); skipped, with the
reason, elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

import heed
from reference import TOLERANCE, assert_close
from test_layer import make_layer, reference_layer

torch = pytest.importorskip("torch", reason="PyTorch is not importable here")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to PyTorch"),
]

POOL_GRANULARITY = 512  # src/cuda/allocator.hpp

CASES = [  # hidden, q_heads, kv_heads, head_dim, lengths (None: no mask), length
    (64, 4, 4, 16, [17, 5, 0], 17),
    (384, 12, 12, 32, [128, 77, 128, 1], 128),
    (40, 6, 2, 8, [7, 129], 129),
    (9, 4, 1, 7, [1, 7, 3], 7),
    (32, 2, 1, 16, None, 19),
]
DTYPES = ["float32", "float16", "bfloat16"]


def on_cuda(arrays, dtype):
    """numpy float32 arrays -> CUDA tensors of `dtype`, and the values they hold, in float64."""
    tensors = {name: torch.from_numpy(a).to("cuda", getattr(torch, dtype)) for name, a in arrays.items()}
    return tensors, {name: t.double().cpu().numpy() for name, t in tensors.items()}


def stored_as(dtype):
    """Rounds float64 values to `dtype` and back, as the layer stores each stage's result."""
    return lambda values: torch.from_numpy(np.asarray(values, dtype=np.float64)).to(getattr(torch, dtype)).double().numpy()


def layer_inputs(rng, hidden, q_heads, kv_heads, head_dim, lengths, length, dtype):
    w, w_values = on_cuda(make_layer(rng, hidden, q_heads, kv_heads, head_dim), dtype)
    batch = 2 if lengths is None else len(lengths)
    x, x_values = on_cuda({"x": rng.standard_normal((batch, length, hidden)).astype(np.float32)}, dtype)
    mask = None if lengths is None else np.arange(length)[None, :] < np.array(lengths)[:, None]
    return w, w_values, x["x"], x_values["x"], mask


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden,q_heads,kv_heads,head_dim,lengths,length", CASES)
def test_layer_on_cuda_against_float64_reference(hidden, q_heads, kv_heads, head_dim, lengths, length, dtype):
    rng = np.random.default_rng(hidden * 1000 + length)
    w, w_values, x, x_values, mask = layer_inputs(rng, hidden, q_heads, kv_heads, head_dim, lengths, length, dtype)
    layer = heed.MultiHeadAttention(q_heads=q_heads, kv_heads=kv_heads, **w)
    assert layer.device == "cuda:0" and layer.dtype == dtype
    got = layer(x, None if mask is None else torch.from_numpy(mask).cuda())
    assert isinstance(got, torch.Tensor) and got.device == x.device and got.dtype == x.dtype and got.shape == x.shape
    expected = reference_layer(x_values, mask, w_values, q_heads, kv_heads, head_dim, stored=stored_as(dtype))
    batch = x.shape[0]
    assert_close(got.float().cpu().numpy().reshape(batch, length, 1, hidden), expected.reshape(batch, length, 1, hidden),
                 dtype)


def test_int_masks_out_and_in_place_on_cuda():
    rng = np.random.default_rng(3)
    w, w_values, x, x_values, _ = layer_inputs(rng, 48, 4, 2, 12, None, 10, "float32")
    layer = heed.MultiHeadAttention(q_heads=4, kv_heads=2, **w)
    int_mask = torch.tensor([[1] * 10, [1] * 4 + [0] * 6], device="cuda")  # tokenizers' int64 mask
    expected = reference_layer(x_values, int_mask.cpu().numpy(), w_values, 4, 2, 12)
    first = layer(x, int_mask)
    assert_close(first.cpu().numpy().reshape(2, 10, 1, 48), expected.reshape(2, 10, 1, 48), "float32")
    out = torch.full_like(x, float("nan"))
    assert layer(x, int_mask.bool(), out=out) is out
    torch.testing.assert_close(out, first, rtol=0, atol=0)
    assert layer(x, int_mask, out=x) is x  # in place: every read of the hidden states comes first
    torch.testing.assert_close(x, first, rtol=0, atol=0)


def test_runs_on_the_current_stream_without_copies():
    rng = np.random.default_rng(5)
    w, _, x, _, mask = layer_inputs(rng, 384, 12, 12, 32, [128, 60, 1, 128], 128, "bfloat16")
    layer = heed.MultiHeadAttention(q_heads=12, **w)
    key_mask = torch.from_numpy(mask).cuda()
    expected = layer(x, key_mask)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        result = layer(x, key_mask)
        call = heed._heed.last_layer_call()
    assert call["stream"] == stream.cuda_stream
    assert call["hidden"] == x.data_ptr() and call["key_padding_mask"] == key_mask.data_ptr()
    assert call["out"] == result.data_ptr() and call["device"] == "cuda:0"
    torch.cuda.current_stream().wait_stream(stream)
    # cuBLAS promises bitwise equal results only while one stream is active.
    torch.testing.assert_close(result, expected, rtol=TOLERANCE["bfloat16"], atol=TOLERANCE["bfloat16"])


def test_plan_and_workspace_on_the_device():
    rng = np.random.default_rng(7)
    w, _, x, _, mask = layer_inputs(rng, 384, 12, 12, 32, [128] * 8, 128, "float16")
    layer = heed.MultiHeadAttention(q_heads=12, **w)
    plan = layer.plan(8, 128)
    assert plan.attention.device == "cuda:0" and plan.workers == 1 and plan.block_rows == 8 * 128
    # The attention's own scratch is a buffer of the layer only when its route takes any (D 32
    # float16 prefill runs the tiled kernel, which takes none).
    attention = ["attention"] if plan.attention.scratch_bytes else []
    assert [b["name"] for b in plan.buffers] == ["q", "k", "v", "heads_out"] + attention
    assert plan.workspace_bytes >= 4 * 8 * 128 * 384 * 2 + plan.attention.scratch_bytes
    assert "cuBLAS" in plan.explain() and plan.attention.explain() in plan.explain()
    torch.cuda.synchronize()
    heed.reset_peak("cuda")
    before = heed.memory_stats("cuda").active
    layer(x, torch.from_numpy(mask).cuda())
    torch.cuda.synchronize()
    stats = heed.memory_stats("cuda")
    rounded = -(-plan.workspace_bytes // POOL_GRANULARITY) * POOL_GRANULARITY
    assert stats.active == before
    assert plan.workspace_bytes <= stats.peak - before <= rounded


def test_profiler_names_the_cuda_stages():
    rng = np.random.default_rng(9)
    w, _, x, _, mask = layer_inputs(rng, 32, 4, 4, 8, [20, 9], 20, "float32")
    layer = heed.MultiHeadAttention(q_heads=4, **w)
    heed.profile.set_mode("shapes")
    try:
        heed.profile.reset()
        layer(x, torch.from_numpy(mask).cuda())
        torch.cuda.synchronize()
        keys = [key for key, _ in heed.profile.entries()]
    finally:
        heed.profile.set_mode("off")
        heed.profile.reset()
    for expected in ("heed_cuda_mha_qkv_f32 [1, 3, 2]", "heed_cuda_mha_out_f32 [1, 1, 2]", "heed_cuda_mha_bias_f32 [40, 1, 1]",
                     "heed_cuda_mha_pad_f32 [40, 1, 1]"):
        assert expected in keys, keys
    assert layer.plan(2, 20).attention.kernel_name in [key.split(" ")[0] for key in keys]


def test_errors_name_the_device_and_the_dtype():
    rng = np.random.default_rng(11)
    w, _, x, _, _ = layer_inputs(rng, 32, 4, 2, 8, None, 5, "float16")
    layer = heed.MultiHeadAttention(q_heads=4, kv_heads=2, **w)
    with pytest.raises(ValueError, match=r"\[heed::MultiHeadAttention\] hidden is on cpu but the layer's weights are on cuda:0"):
        layer(x.cpu())
    with pytest.raises(ValueError, match=r"hidden has dtype float32 but the layer's weights have float16"):
        layer(x.float())
    with pytest.raises(ValueError, match=r"key_padding_mask is on cpu but the layer's weights are on cuda:0"):
        layer(x, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"k_weight is on cpu but the layer's weights are on cuda:0"):
        heed.MultiHeadAttention(q_heads=4, kv_heads=2, **{**w, "k_weight": w["k_weight"].cpu()})
    with pytest.raises(ValueError, match=r"out has dtype float32 but the layer's weights have float16"):
        layer(x, out=torch.empty(2, 5, 32, device="cuda"))
    out = torch.full_like(x, 7.0)
    with pytest.raises(ValueError, match=r"key_padding_mask shape \[2, 4\] must be \[2, 5\]"):
        layer(x, torch.ones(2, 4, dtype=torch.bool, device="cuda"), out=out)
    assert (out == 7.0).all()


def test_agrees_with_pytorch_multihead_attention_on_the_same_parameters():
    """nn.MultiheadAttention's packed in_proj_weight, sliced into heed's q/k/v views (no copy);
    its key_padding_mask is True for padding, heed's True for real tokens; heed's padded
    positions are zero, PyTorch's are not, so only real positions are compared."""
    torch.manual_seed(13)
    hidden, heads = 256, 8
    mha = torch.nn.MultiheadAttention(hidden, heads, batch_first=True, device="cuda").eval()
    for p in (mha.in_proj_bias, mha.out_proj.bias):
        torch.nn.init.normal_(p, std=0.5)
    wq, wk, wv = mha.in_proj_weight.chunk(3)
    bq, bk, bv = mha.in_proj_bias.chunk(3)
    layer = heed.MultiHeadAttention(q_weight=wq, k_weight=wk, v_weight=wv, out_weight=mha.out_proj.weight, q_bias=bq,
                                    k_bias=bk, v_bias=bv, out_bias=mha.out_proj.bias, q_heads=heads)
    x = torch.randn(3, 50, hidden, device="cuda")
    real = torch.arange(50, device="cuda")[None, :] < torch.tensor([[50], [31], [2]], device="cuda")
    with torch.no_grad():
        expected, _ = mha(x, x, x, key_padding_mask=~real, need_weights=False)
    got = layer(x, real)
    tolerance = TOLERANCE["float32"]
    torch.testing.assert_close(got[real], expected[real], rtol=tolerance, atol=tolerance)
    assert (got[~real] == 0).all()


def test_readme_layer_snippets_run_as_written():
    from test_readme import README, python_blocks

    blocks = [b for b in python_blocks(README.read_text()) if "heed.MultiHeadAttention(" in b]
    assert len(blocks) == 2, "the README's numpy and CUDA layer snippets"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    y = namespace["y"]
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.bfloat16 and y.shape == (2, 16, 384)
    assert (y[1, 9:] == 0).all() and (y[1, :9] != 0).any()
