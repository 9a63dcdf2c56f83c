"""The float64 oracle of the Python tests, written from the semantics (docs/design.md §1)
with numpy alone, and the one tolerance table (the C++ tests' values)."""

from __future__ import annotations

import numpy as np

# atol = rtol per dtype; the mean normalised error must stay below MEAN_ERROR_FRACTION.
TOLERANCE = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1.6e-2}
MEAN_ERROR_FRACTION = 0.25


def _broadcast_mask(mask: np.ndarray, target: tuple) -> np.ndarray:
    if mask.ndim == 2:
        mask = mask[None, None]
    return np.broadcast_to(mask, target)


def attention(q, k, v, scale, causal=False, mask=None, window=None, sinks=None, softcap=None) -> np.ndarray:
    """softmax(scale q·kᵀ + mask) v in float64; bottom-right causal; rows that see no key are 0;
    with a softcap c the scaled scores s become c·tanh(s / c) before the mask."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, q_heads, q_len, _ = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    group = q_heads // kv_heads if kv_heads else 1
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = scale * np.einsum("bhid,bhjd->bhij", q, k)
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    target = (batch, q_heads, q_len, kv_len)
    allowed = np.ones(target, dtype=bool)
    i = np.arange(q_len)[:, None]
    j = np.arange(kv_len)[None, :]
    offset = kv_len - q_len
    if causal:
        allowed &= j <= i + offset
    if window is not None:
        allowed &= j > i + offset - window
    if mask is not None:
        if mask.dtype == np.bool_:
            allowed &= _broadcast_mask(mask, target)
        else:
            scores = scores + _broadcast_mask(np.asarray(mask, dtype=np.float64), target)
    scores = np.where(allowed, scores, -np.inf)
    seen = np.isfinite(scores).any(axis=-1, keepdims=True)
    top = np.where(seen, scores.max(axis=-1, keepdims=True, initial=-np.inf), 0.0)
    sink_logits = None
    if sinks is not None:
        sink_logits = np.asarray(sinks, dtype=np.float64)[None, :, None, None]
        top = np.maximum(top, np.where(seen, sink_logits, 0.0))
    weights = np.where(seen, np.exp(scores - top), 0.0)
    denominator = weights.sum(axis=-1, keepdims=True)
    if sink_logits is not None:
        denominator = denominator + np.exp(sink_logits - top)
    out = np.einsum("bhij,bhjd->bhid", weights, v) / np.where(seen, denominator, 1.0)
    return np.where(seen, out, 0.0)


def assert_close(got, expected: np.ndarray, dtype_name: str) -> None:
    """Max and mean normalised error within the dtype's tolerance; NaN never passes; rows the
    oracle gives as exact zeros must be exact zeros."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} NaN in the result"
    if got.size == 0:
        return
    tol = TOLERANCE[dtype_name]
    error = np.abs(got - expected) / (tol + tol * np.abs(expected))
    worst = np.unravel_index(np.argmax(error), error.shape)
    assert error.max() <= 1.0, f"max error {error.max():.3g} at {worst}: got {got[worst]}, expected {expected[worst]}"
    assert error.mean() <= MEAN_ERROR_FRACTION, f"mean error {error.mean():.3g}"
    zero_rows = (expected == 0).all(axis=-1)
    assert (got[zero_rows] == 0).all(), "a row that sees no key is not exactly zero"


def attention_with_lse(q, k, v, scale, causal=False, mask=None, window=None, sinks=None, softcap=None):
    """(out, lse) in float64 for dense [B, H, L, D] inputs, from the definition: head h reads key
    head h // (Hq / Hkv); softcap c makes each scaled score c·tanh(s / c); causal and window are
    bottom-right aligned; exp(sink) joins the denominator with no value row; a row that sees no
    key is zeros. lse = log(sum of exp(s) over the visible keys + exp(sink)), natural log, -inf
    for a row with no key and no sink."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, q_heads, q_len, _ = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    key_head = np.arange(q_heads) // (q_heads // kv_heads) if kv_heads else np.zeros(0, int)
    k, v = k[:, key_head], v[:, key_head]
    scores = scale * np.einsum("bhid,bhjd->bhij", q, k)
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    i = np.arange(q_len)[:, None]
    j = np.arange(kv_len)[None, :]
    visible = np.ones((batch, q_heads, q_len, kv_len), dtype=bool)
    if causal:
        visible &= j <= i + (kv_len - q_len)
    if window is not None:
        visible &= j > i + (kv_len - q_len) - window
    if mask is not None:
        if mask.dtype == np.bool_:
            visible &= _broadcast_mask(mask, visible.shape)
        else:
            scores = scores + _broadcast_mask(np.asarray(mask, dtype=np.float64), visible.shape)
    scores = np.where(visible, scores, -np.inf)
    sink = np.full((batch, q_heads, q_len), -np.inf)
    if sinks is not None:
        sink[...] = np.asarray(sinks, dtype=np.float64)[None, :, None]
    top = np.maximum(scores.max(axis=-1, initial=-np.inf), sink)
    frame = np.where(np.isfinite(top), top, 0.0)
    weights = np.exp(scores - frame[..., None])  # exp(-inf) = 0 for hidden keys
    denominator = weights.sum(axis=-1) + np.exp(sink - frame)
    with np.errstate(divide="ignore"):
        lse = np.where(denominator > 0, frame + np.log(denominator), -np.inf)
    seen = np.isfinite(scores).any(axis=-1)
    out = np.einsum("bhij,bhjd->bhid", weights, v) / np.where(seen, denominator, 1.0)[..., None]
    return np.where(seen[..., None], out, 0.0), lse


def _sequence(q_rows, k_rows, v_rows, scale, **options):
    """One sequence of [L, H, E] rows through attention_with_lse: (out [Lq, Hq, Dv], lse [Lq, Hq])."""
    out, lse = attention_with_lse(*(np.asarray(x).transpose(1, 0, 2)[None] for x in (q_rows, k_rows, v_rows)), scale,
                                  **options)
    return out[0].transpose(1, 0, 2), lse[0].T


def ragged_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, scale, **options):
    """(out [total_q, Hq, Dv], lse [total_q, Hq]) in float64: sequence b's queries are rows
    cu_seqlens_q[b]:cu_seqlens_q[b + 1] of q, its keys those of cu_seqlens_k in k and v."""
    out = np.zeros(q.shape[:2] + v.shape[2:])
    lse = np.full(q.shape[:2], -np.inf)
    for b in range(len(cu_seqlens_q) - 1):
        rows = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
        keys = slice(int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1]))
        out[rows], lse[rows] = _sequence(q[rows], k[keys], v[keys], scale, **options)
    return out, lse


def paged_attention(q, k_cache, v_cache, block_table, seqlens_k, scale, cu_seqlens_q=None, **options):
    """(out, lse) in float64 over a paged cache [num_pages, page_size, H, E]: sequence b's key j
    is row j % page_size of page block_table[b, j // page_size]; q [B, Hq, D] has one query per
    sequence, or with cu_seqlens_q q [total_q, Hq, D] the last queries of each."""
    page_size = k_cache.shape[1]
    out = np.zeros(q.shape[:2] + v_cache.shape[3:])
    lse = np.full(q.shape[:2], -np.inf)
    for b in range(len(seqlens_k)):
        j = np.arange(int(seqlens_k[b]))
        pages = np.asarray(block_table)[b, j // page_size]
        rows = slice(b, b + 1) if cu_seqlens_q is None else slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
        out[rows], lse[rows] = _sequence(q[rows], k_cache[pages, j % page_size], v_cache[pages, j % page_size], scale,
                                         **options)
    return out, lse


def assert_lse_close(got, expected: np.ndarray, dtype_name: str) -> None:
    """lse within the dtype's tolerance (relative to 1 + |lse|); -inf exactly where expected, no NaN."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == expected.shape, f"lse shape {got.shape} != {expected.shape}"
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} NaN in lse"
    empty = np.isneginf(expected)
    assert (np.isneginf(got) == empty).all(), (
        f"lse -inf at {np.argwhere(np.isneginf(got) != empty)[:4].tolist()}: got {got[np.isneginf(got) != empty][:4]}, "
        f"expected {expected[np.isneginf(got) != empty][:4]}")
    if (~empty).sum() == 0:
        return
    tol = TOLERANCE[dtype_name]
    error = np.abs(got[~empty] - expected[~empty]) / (tol + tol * np.abs(expected[~empty]))
    worst = int(np.argmax(error))
    assert error.max() <= 1.0, (f"lse max error {error.max():.3g}: got {got[~empty][worst]}, "
                                f"expected {expected[~empty][worst]}")
    assert error.mean() <= MEAN_ERROR_FRACTION, f"lse mean error {error.mean():.3g}"
