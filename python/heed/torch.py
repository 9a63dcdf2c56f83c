"""heed.attention as a PyTorch custom op, `torch.ops.heed.attention`, so that it runs under
torch.compile (fullgraph=True) without graph breaks. Forward only: there is no backward.

    import torch, heed.torch
    out = heed.torch.attention(q, k, v, causal=True)       # q [B, Hq, Lq, D], k/v [B, Hkv, Lk, D|Dv]
    compiled = torch.compile(lambda q, k, v: heed.torch.attention(q, k, v, causal=True), fullgraph=True)

How it differs from torch.nn.functional.scaled_dot_product_attention (SDPA):
- Layout and heads are the same ([B, H, L, D]); GQA needs no `enable_gqa`: Hq a multiple of Hkv is read.
- `causal=True` is bottom-right aligned (query i sees key j iff j <= i + Lk - Lq); SDPA's
  `is_causal` is top-left. They agree when Lq == Lk; for decode (Lq = 1) heed's query sees
  every key, SDPA's sees only the first.
- `causal` and `mask` may be combined (a key must pass both); SDPA rejects the pair.
- A query row that sees no key is zeros, on every route and dtype, with or without sinks:
  a promise, where SDPA's result for such rows depends on its backend and version.
- `sinks` ([Hq] logits, gpt-oss), `window` (causal sliding window) and `softcap` (c·tanh(s/c),
  Gemma 2) have no SDPA argument.
- No dropout, no backward.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import attention as _heed_attention

__all__ = ["attention"]


@torch.library.custom_op("heed::attention", mutates_args=())
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    max_score_bytes: Optional[int] = None,
) -> torch.Tensor:
    """heed.attention on torch tensors (CPU or CUDA, on the current stream), as a custom op.
    The arguments are heed.attention's; mask and sinks may also be passed by position
    (custom ops take no keyword-only tensors)."""
    return _heed_attention(q, k, v, scale=scale, causal=causal, mask=mask, window=window, sinks=sinks,
                           softcap=softcap, max_score_bytes=max_score_bytes)


@attention.register_fake
def _attention_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    max_score_bytes: Optional[int] = None,
) -> torch.Tensor:
    torch._check(q.dim() == 4 and v.dim() == 4, lambda: "[heed.attention] q and v must have rank 4")
    return q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]))
