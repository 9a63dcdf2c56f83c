"""heed.MultiHeadAttention: the encoder attention layer (BERT-style self-attention with
projections and biases, GQA/MQA, a key padding mask) on heed's C++ layer."""

from __future__ import annotations

from typing import Any, Optional

from . import _heed
from ._heed import LayerPlan


class MultiHeadAttention:
    """out [B, L, hidden] = (attention(x·Wqᵀ + bq, x·Wkᵀ + bk, x·Wvᵀ + bv, key padding)) · Woᵀ + bo,
    the rows of padded positions set to zero.

    Weights are float32 arrays (any DLPack library, on the CPU) in PyTorch's nn.Linear layout
    [out_features, in_features]: q_weight [q_heads·head_dim, hidden], k_weight and v_weight
    [kv_heads·head_dim, hidden], out_weight [hidden, q_heads·head_dim]; biases optional. The
    layer reads them in place (no copy) and keeps them alive; do not change them while it is
    used. kv_heads defaults to q_heads (MHA); fewer is GQA, 1 is MQA. head_dim defaults to
    q_weight's rows / q_heads, scale to 1/sqrt(head_dim). Errors as heed.attention's:
    ValueError for invalid input (heed's message), NotImplementedError for a dtype or device
    the layer does not run (float16, bfloat16, CUDA).
    """

    def __init__(self, *, q_weight: Any, k_weight: Any, v_weight: Any, out_weight: Any, q_heads: int,
                 kv_heads: Optional[int] = None, head_dim: Optional[int] = None, q_bias: Any = None,
                 k_bias: Any = None, v_bias: Any = None, out_bias: Any = None, scale: Optional[float] = None):
        hidden = int(out_weight.shape[0])
        if head_dim is None:
            head_dim = int(q_weight.shape[0]) // q_heads if q_heads > 0 else 0
        self.hidden, self.q_heads = hidden, int(q_heads)
        self.kv_heads = int(kv_heads) if kv_heads is not None else self.q_heads
        self.head_dim = int(head_dim)
        self._layer = _heed.MultiHeadAttention(hidden, self.q_heads, self.kv_heads, self.head_dim, scale, q_weight,
                                               k_weight, v_weight, out_weight, q_bias, k_bias, v_bias, out_bias)

    @property
    def scale(self) -> float:
        return float(self._layer.scale)

    def plan(self, batch: int, length: int, key_padding: bool = True) -> LayerPlan:
        """The plan of a call on hidden states [batch, length, hidden]: workspace_bytes, the
        attention's plan, explain()."""
        return self._layer.plan(int(batch), int(length), bool(key_padding))

    def __call__(self, hidden: Any, key_padding_mask: Any = None, *, out: Any = None) -> Any:
        """hidden [B, L, hidden] float32; key_padding_mask [B, L], True (or non-zero) for real
        tokens; returns a new array of hidden's library, or `out` filled in place (out may be
        hidden itself)."""
        from . import _empty, _framework

        if key_padding_mask is not None and str(getattr(key_padding_mask, "dtype", "bool")) not in ("bool", "torch.bool"):
            key_padding_mask = key_padding_mask != 0  # tokenizers' int masks
        if out is None:
            shape = tuple(int(n) for n in getattr(hidden, "shape", ()))
            if len(shape) != 3:
                raise ValueError(f"[heed.MultiHeadAttention] hidden must have shape [batch, length, {self.hidden}], "
                                 f"got {list(shape)}")
            if _framework(hidden) == "jax":
                raise ValueError("[heed.MultiHeadAttention] JAX arrays are not supported by the layer; pass numpy")
            out, _ = _empty(hidden, shape)
        self._layer.forward_into(hidden, key_padding_mask, out)
        return out

    forward = __call__
