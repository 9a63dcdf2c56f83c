"""Logit softcap and NaN inputs through the Python module, on the CPU, against the numpy oracle."""

import math

import numpy as np
import pytest

import heed
from reference import assert_close, attention as oracle

ml_dtypes = pytest.importorskip("ml_dtypes")

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _inputs(dtype, q_len, kv_len, spread=4.0, seed=0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((1, 4, q_len, 64)) * spread).astype(dtype)
    k = (rng.standard_normal((1, 2, kv_len, 64)) * spread).astype(dtype)
    v = rng.standard_normal((1, 2, kv_len, 64)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("q_len", [1, 40])
def test_softcap_matches_oracle(dtype_name, q_len):
    q, k, v = _inputs(DTYPES[dtype_name], q_len, 130)
    sinks = np.linspace(-1.0, 3.0, 4).astype(np.float32)
    out = heed.attention(q, k, v, causal=True, window=90, sinks=sinks, softcap=30.0)
    expected = oracle(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), 1 / math.sqrt(64),
                      causal=True, window=90, sinks=sinks, softcap=30.0)
    assert_close(out, expected, dtype_name)


def test_softcap_changes_the_result_and_the_plan_names_it():
    q, k, v = _inputs(np.float32, 16, 64)
    capped = heed.attention(q, k, v, softcap=5.0)
    plain = heed.attention(q, k, v)
    assert np.abs(capped - plain).max() > 1e-2
    assert "softcap 5" in heed.plan(q, k, v, softcap=5.0).explain()


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf"), 1e300])
def test_softcap_must_be_finite_and_positive(value):
    q, k, v = _inputs(np.float32, 4, 8)
    with pytest.raises(ValueError, match="softcap"):
        heed.attention(q, k, v, softcap=value)


@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_nan_in_q_gives_nan_not_zeros(dtype_name):
    dtype = DTYPES[dtype_name]
    q = np.ones((1, 1, 1, 4), dtype)
    q[0, 0, 0, 0] = np.nan
    k = np.ones((1, 1, 3, 4), dtype)
    assert np.isnan(heed.attention(q, k, k).astype(np.float64)).all()


@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_nan_row_stays_alone(dtype_name):
    q, k, v = _inputs(DTYPES[dtype_name], 12, 70, spread=1.0)
    q[0, 0, 1, 0] = np.nan
    out = heed.attention(q, k, v).astype(np.float64)
    assert np.isnan(out[0, 0, 1]).all()
    rest = np.ones(out.shape[:3], bool)
    rest[0, 0, 1] = False
    assert not np.isnan(out[rest]).any()
