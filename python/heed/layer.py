"""heed.MultiHeadAttention: the encoder attention layer (BERT-style self-attention with
projections and biases, GQA/MQA, a key padding mask) on heed's C++ layer, on the CPU or a
CUDA device."""

from __future__ import annotations

from typing import Any, Optional

from . import _heed
from ._heed import LayerPlan

_OP = "heed.MultiHeadAttention"


def _detached(array: Any) -> Any:
    """A PyTorch parameter's data without its autograd history (heed is forward only), else the array."""
    return array.detach() if getattr(array, "requires_grad", False) else array


def _rows(weight: Any, name: str, layout: str) -> int:
    """The first dimension of a weight [out_features, in_features]: TypeError when it is no array,
    ValueError when it is not of rank 2 (the C++ layer checks the rest)."""
    from . import _Call

    _Call(_OP).prepare(weight, name)  # TypeError, naming the argument, for what is no array
    shape = tuple(getattr(weight, "shape", ()))
    if len(shape) != 2:
        raise ValueError(f"[{_OP}] {name} must have rank 2 {layout}, got shape {[int(n) for n in shape]}")
    return int(shape[0])


class MultiHeadAttention:
    """out [B, L, hidden] = (attention(x·Wqᵀ + bq, x·Wkᵀ + bk, x·Wvᵀ + bv, key padding)) · Woᵀ + bo,
    the rows of padded positions set to zero.

    Weights are arrays of any DLPack library in PyTorch's nn.Linear layout
    [out_features, in_features]: q_weight [q_heads·head_dim, hidden], k_weight and v_weight
    [kv_heads·head_dim, hidden], out_weight [hidden, q_heads·head_dim]; biases optional. All
    on one device and of one dtype, which are the layer's: float32 on the CPU (numpy, PyTorch);
    float32, float16 or bfloat16 on a CUDA device (PyTorch, CuPy), float32 accumulation. The
    layer reads them in place (no copy) and keeps them alive; do not change them while it is
    used. kv_heads defaults to q_heads (MHA); fewer is GQA, 1 is MQA. head_dim defaults to
    q_weight's rows / q_heads, scale to 1/sqrt(head_dim). Errors as heed.attention's:
    ValueError for invalid input (heed's message, e.g. tensors on another device than the
    weights), TypeError for an argument that is no array, NotImplementedError for a dtype or
    device the layer does not run (float16 or bfloat16 on the CPU; CUDA in a build without it or
    on a machine without a device). B = 0 or L = 0 gives the empty output.
    """

    def __init__(self, *, q_weight: Any, k_weight: Any, v_weight: Any, out_weight: Any, q_heads: int,
                 kv_heads: Optional[int] = None, head_dim: Optional[int] = None, q_bias: Any = None,
                 k_bias: Any = None, v_bias: Any = None, out_bias: Any = None, scale: Optional[float] = None):
        hidden = _rows(out_weight, "out_weight", "[hidden, q_heads * head_dim]")
        q_rows = _rows(q_weight, "q_weight", "[q_heads * head_dim, hidden]")
        if head_dim is None:
            head_dim = q_rows // q_heads if q_heads > 0 else 0
        self.hidden, self.q_heads = hidden, int(q_heads)
        self.kv_heads = int(kv_heads) if kv_heads is not None else self.q_heads
        self.head_dim = int(head_dim)
        q_weight, k_weight, v_weight, out_weight, q_bias, k_bias, v_bias, out_bias = (
            _detached(w) for w in (q_weight, k_weight, v_weight, out_weight, q_bias, k_bias, v_bias, out_bias))
        self._layer = _heed.MultiHeadAttention(hidden, self.q_heads, self.kv_heads, self.head_dim, scale, q_weight,
                                               k_weight, v_weight, out_weight, q_bias, k_bias, v_bias, out_bias)

    @property
    def scale(self) -> float:
        return float(self._layer.scale)

    @property
    def device(self) -> str:
        """The weights' device, where the layer runs: 'cpu' or 'cuda:N'."""
        return str(self._layer.device)

    @property
    def dtype(self) -> str:
        """The weights' dtype, the layer's: 'float32', 'float16' or 'bfloat16'."""
        return str(self._layer.dtype)

    def plan(self, batch: int, length: int, key_padding: bool = True) -> LayerPlan:
        """The plan of a call on hidden states [batch, length, hidden]: workspace_bytes, the
        attention's plan, explain()."""
        return self._layer.plan(int(batch), int(length), bool(key_padding))

    def __call__(self, hidden: Any, key_padding_mask: Any = None, *, out: Any = None) -> Any:
        """hidden [B, L, hidden] of the layer's dtype, on its device; key_padding_mask [B, L],
        True (or non-zero) for real tokens, on the same device; returns a new array of hidden's
        library on hidden's device, or `out` filled in place (out may be hidden itself). On
        CUDA the layer runs on the caller's current stream (PyTorch's or CuPy's) and the call
        does not wait for it."""
        from . import _Call, _empty, _framework

        call = _Call(_OP, stream_source=hidden)
        hidden_in = call.prepare(hidden, "hidden")  # TypeError first for what is no array
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
        mask_in = None if key_padding_mask is None else call.prepare(key_padding_mask, "key_padding_mask")
        self._layer.forward_into(hidden_in, mask_in, call.prepare(out, "out"), call.stream)
        return out

    forward = __call__
