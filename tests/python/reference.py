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
