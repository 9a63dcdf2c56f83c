"""heed.attention on numpy arrays against the float64 oracle, over a hand-picked grid like
the C++ kernel tests' quick tier: odd sizes, head sizes, GQA, masks, windows, sinks, caps,
layouts and dtypes, each with its output poisoned before the call."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import pytest

import heed
import reference
from conftest import in_layout, numpy_dtype, random


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int = 64
    value_dim: int = -1
    dtype: str = "float32"
    causal: bool = False
    window: Optional[int] = None
    mask: Optional[str] = None  # bool2d, bool4d, key_padding, additive
    mask_dtype: str = "float32"
    sinks: bool = False
    cap: Optional[int] = None
    layout: str = "contiguous"
    out_layout: str = "contiguous"
    masked_rows: bool = False  # some query rows see no key
    scale: Optional[float] = None

    def __str__(self) -> str:
        return self.name


CASES = [
    # Odd sizes.
    Case("tiny_1x1", 1, 1, 1, 1, 1, 32),
    Case("odd_7x17", 2, 3, 3, 7, 17),
    Case("odd_17x7", 1, 2, 1, 17, 7),
    Case("odd_127x129", 1, 2, 2, 127, 129),
    Case("odd_129x1000_causal", 1, 1, 1, 129, 1000, causal=True),
    Case("decode_mqa_1000", 1, 8, 1, 1, 1000, 128),
    # Head sizes, D != Dv, explicit scale.
    Case("d96_dv64", 1, 2, 1, 40, 150, 96, 64),
    Case("d256_scale", 1, 2, 2, 20, 100, 256, scale=0.3),
    Case("d80_dv112", 1, 2, 2, 24, 60, 80, 112),
    # GQA and MQA.
    Case("gqa_decode_bf16", 2, 32, 8, 1, 300, 128, dtype="bfloat16"),
    Case("gqa_prefill_causal", 1, 8, 2, 65, 200, causal=True),
    Case("gqa_prefill_f16", 1, 4, 2, 33, 140, dtype="float16", causal=True),
    # Masks.
    Case("causal_lq_gt_lk", 1, 2, 2, 50, 20, causal=True, masked_rows=True),
    Case("bool2d", 1, 2, 2, 37, 150, mask="bool2d", masked_rows=True),
    Case("bool4d", 2, 2, 1, 20, 60, mask="bool4d", masked_rows=True),
    Case("key_padding", 3, 2, 2, 7, 100, mask="key_padding", masked_rows=True),
    Case("additive", 1, 2, 2, 29, 131, mask="additive", masked_rows=True),
    Case("additive_f16", 1, 2, 2, 30, 64, dtype="float16", mask="additive", mask_dtype="float16", masked_rows=True),
    Case("additive_bf16_decode", 1, 8, 2, 1, 250, dtype="bfloat16", mask="additive", mask_dtype="bfloat16"),
    Case("causal_and_bool", 1, 2, 2, 40, 140, causal=True, mask="bool2d", masked_rows=True),
    # Windows and sinks.
    Case("window16", 1, 2, 2, 100, 300, causal=True, window=16),
    Case("window100_decode", 1, 8, 2, 1, 1000, causal=True, window=100),
    Case("window5_lq_gt_lk", 1, 2, 2, 40, 30, causal=True, window=5, masked_rows=True),
    Case("sinks", 1, 4, 2, 33, 150, sinks=True),
    Case("sinks_decode_bf16", 1, 8, 1, 1, 600, dtype="bfloat16", sinks=True),
    Case("sinks_masked_rows", 1, 2, 2, 20, 40, mask="additive", sinks=True, masked_rows=True),
    # Score caps.
    Case("cap_blocks", 1, 2, 2, 200, 100, cap=100 * 4 * 16),
    Case("cap_tiny_causal_f16", 1, 2, 2, 129, 128, dtype="float16", causal=True, cap=256),
    # Layouts of q, k, v and out.
    Case("blhd", 2, 4, 2, 33, 140, layout="blhd", out_layout="blhd"),
    Case("blhd_bf16_causal", 1, 4, 2, 30, 90, dtype="bfloat16", causal=True, layout="blhd"),
    Case("padded", 1, 2, 2, 17, 60, layout="padded", out_layout="padded"),
    Case("strided_last", 1, 2, 1, 19, 70, layout="strided_last", out_layout="strided_last"),
    Case("reversed", 1, 2, 2, 21, 50, layout="reversed", out_layout="reversed", causal=True),
    # Empty sizes.
    Case("empty_batch", 0, 2, 2, 5, 7),
    Case("empty_queries", 1, 2, 2, 0, 7),
    Case("no_keys", 1, 2, 1, 5, 0),
]


def make_inputs(case: Case, seed: int = 0):
    """q, k, v (in the case's layout), mask and sinks as numpy arrays, and the oracle's output."""
    rng = np.random.default_rng(seed)
    dtype = numpy_dtype(case.dtype)
    value_dim = case.value_dim if case.value_dim >= 0 else case.head_dim
    q = random(rng, (case.batch, case.q_heads, case.q_len, case.head_dim), dtype)
    k = random(rng, (case.batch, case.kv_heads, case.kv_len, case.head_dim), dtype)
    v = random(rng, (case.batch, case.kv_heads, case.kv_len, value_dim), dtype)
    mask = None
    if case.mask in ("bool2d", "bool4d", "key_padding"):
        shape = {"bool2d": (case.q_len, case.kv_len), "bool4d": (case.batch, case.q_heads, case.q_len, case.kv_len),
                 "key_padding": (case.batch, 1, 1, case.kv_len)}[case.mask]
        mask = rng.random(shape) < 0.7
        if case.masked_rows:  # a row (or, for key padding, a batch) that sees no key
            mask[(0,) * (mask.ndim - 1)] = False
    elif case.mask == "additive":
        mask = random(rng, (case.q_len, case.kv_len), numpy_dtype(case.mask_dtype))
        mask[rng.random(mask.shape) < 0.3] = -np.inf
        if case.masked_rows:
            mask[0] = -np.inf
    sinks = random(rng, (case.q_heads,), dtype) if case.sinks else None
    scale = case.scale if case.scale is not None else 1 / math.sqrt(case.head_dim)
    expected = reference.attention(q, k, v, scale, causal=case.causal, mask=mask, window=case.window, sinks=sinks)
    if case.masked_rows:
        assert (expected == 0).all(axis=-1).any(), f"{case.name}: no row sees no key"
    layout = case.layout
    return (in_layout(q, layout), in_layout(k, layout), in_layout(v, layout)), mask, sinks, expected


def call_kwargs(case: Case, mask, sinks) -> dict:
    return dict(scale=case.scale, causal=case.causal, mask=mask, window=case.window, sinks=sinks,
                max_score_bytes=case.cap)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_against_oracle(case: Case):
    (q, k, v), mask, sinks, expected = make_inputs(case)
    out = in_layout(np.full(expected.shape, np.nan, dtype=q.dtype), case.out_layout)
    result = heed.attention(q, k, v, out=out, **call_kwargs(case, mask, sinks))
    assert result is out
    reference.assert_close(result.astype(np.float64), expected, case.dtype)


@pytest.mark.parametrize("case", [c for c in CASES if c.batch * c.q_heads * c.q_len > 0][::3], ids=str)
def test_new_output_matches_out(case: Case):
    """Without `out`, the result is a new contiguous numpy array of q's dtype, equal to the
    result written into a strided `out` (routes do not depend on the output's strides)."""
    (q, k, v), mask, sinks, expected = make_inputs(case)
    result = heed.attention(q, k, v, **call_kwargs(case, mask, sinks))
    assert type(result) is np.ndarray and result.dtype == q.dtype and result.flags.c_contiguous
    reference.assert_close(result.astype(np.float64), expected, case.dtype)
    out = in_layout(np.zeros(expected.shape, dtype=q.dtype), "padded")
    heed.attention(q, k, v, out=out, **call_kwargs(case, mask, sinks))
    np.testing.assert_array_equal(out, result)


def test_plan_names_the_kernel_that_runs():
    """Every case's plan names the kernel the profiler then records."""
    heed.profile.set_mode("shapes")
    try:
        for case in CASES:
            (q, k, v), mask, sinks, _ = make_inputs(case)
            kwargs = call_kwargs(case, mask, sinks)
            plan = heed.plan(q, k, v, **kwargs)
            heed.profile.reset()
            heed.attention(q, k, v, **kwargs)
            names = [key.split(" ")[0] for key, _ in heed.profile.entries()]
            if case.batch * case.q_heads * case.q_len == 0:
                assert names == [] and plan.scratch_bytes == 0, case.name
            else:
                assert plan.kernel_name in names, f"{case.name}: plan {plan.kernel_name}, ran {names}"
    finally:
        heed.profile.set_mode("off")
        heed.profile.reset()
