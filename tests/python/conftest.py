"""Shared helpers of the Python tests: dtypes, layouts (strided views of the same logical
array) and optional libraries."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

try:
    import ml_dtypes

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # the test command installs it; without it bfloat16 cases skip
    BFLOAT16 = None

DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BFLOAT16}


def numpy_dtype(name: str) -> np.dtype:
    if DTYPES[name] is None:
        pytest.skip("ml_dtypes is not importable: numpy has no bfloat16 without it")
    return DTYPES[name]


def in_layout(values: np.ndarray, layout: str) -> np.ndarray:
    """A view with `values`' contents whose strides follow `layout`:
    contiguous; blhd ([B, H, L, D] stored as [B, L, H, D]); strided_last (last stride 2);
    reversed (dimension 2 with a negative stride); padded (gaps in every dimension)."""
    if layout == "contiguous":
        return np.ascontiguousarray(values)
    if layout == "blhd":
        storage = np.empty((values.shape[0], values.shape[2], values.shape[1], values.shape[3]), values.dtype)
        view = storage.transpose(0, 2, 1, 3)
    elif layout == "strided_last":
        storage = np.empty(values.shape[:-1] + (2 * values.shape[-1],), values.dtype)
        view = storage[..., ::2]
    elif layout == "reversed":
        view = np.empty(values.shape, values.dtype)[:, :, ::-1, :]
    elif layout == "padded":
        storage = np.empty(tuple(n + 3 for n in values.shape), values.dtype)
        view = storage[tuple(slice(1, 1 + n) for n in values.shape)]
    else:
        raise ValueError(layout)
    view[...] = values
    return view


def random(rng: np.random.Generator, shape: tuple, dtype: np.dtype, stddev: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * stddev).astype(dtype)


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is not importable here")


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None
