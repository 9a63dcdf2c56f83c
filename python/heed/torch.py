"""heed's calls as PyTorch custom ops, `torch.ops.heed.attention` (and `attention_varlen`,
`attention_paged`, `merge_states`), so that they run under torch.compile (fullgraph=True) without
graph breaks. Forward only: there is no backward.

    import torch, heed.torch
    out = heed.torch.attention(q, k, v, causal=True)       # q [B, Hq, Lq, D], k/v [B, Hkv, Lk, D|Dv]
    out, lse = heed.torch.attention(q, k, v, causal=True, return_lse=True)
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

A custom op's schema fixes what it returns, so each entry point here is a plain function that
calls one of two ops: `torch.ops.heed.attention` returns out, its twin `torch.ops.heed.attention_lse`
(out, lse) (likewise `attention_varlen[_lse]`, `attention_paged[_lse]`). torch.compile traces
through the function to the op; opcheck takes the op (`torch.ops.heed.attention.default`).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from . import _flag
from . import attention as _heed_attention
from . import attention_paged as _heed_attention_paged
from . import attention_varlen as _heed_attention_varlen
from . import merge_states as _heed_merge_states

__all__ = ["attention", "attention_varlen", "attention_paged", "merge_states"]


def _probe(module: Any, name: str) -> Any:
    return getattr(module, name, None)


# What makes the dispatcher do more than call heed; where this torch lacks a probe, every call
# dispatches.
_PROBES = (_probe(torch.compiler, "is_compiling"), _probe(torch.jit, "is_tracing"),
           _probe(torch._C, "_len_torch_dispatch_stack"), _probe(torch._C, "_is_torch_function_mode_enabled"),
           _probe(torch._C, "_are_functorch_transforms_active"), _probe(torch.autograd, "_profiler_enabled"))
_DIRECT = all(probe is not None for probe in _PROBES)


def _direct(options: Any, allowed: Any, *tensors: Optional[torch.Tensor]) -> bool:
    """True where torch.ops.heed.* would only call heed: the op's own keywords, exact
    torch.Tensors, no compile, trace, mode, functorch transform or profiler, and no input that
    autograd would record. Then the call skips the dispatcher, which costs more host time than
    heed's whole call; its result and errors are the op's."""
    if not _DIRECT or not allowed.issuperset(options):
        return False
    if any(probe() for probe in _PROBES):
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or (grad and t.requires_grad)):
            return False
    return True


def _lse_like(q: torch.Tensor) -> torch.Tensor:
    return q.new_empty(q.shape[:-1], dtype=torch.float32)


# --- dense ---

_DENSE_KEYWORDS = frozenset(("scale", "causal", "window", "softcap", "max_score_bytes"))
_SERVING_KEYWORDS = frozenset(("scale", "causal", "window", "softcap", "max_seqlen_q", "max_seqlen_k"))


@torch.library.custom_op("heed::attention", mutates_args=())
def _attention(
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


@torch.library.custom_op("heed::attention_lse", mutates_args=())
def _attention_lse(
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
) -> Tuple[torch.Tensor, torch.Tensor]:
    """heed.attention(..., return_lse=True) on torch tensors: (out, lse [B, Hq, Lq] float32)."""
    return _heed_attention(q, k, v, scale=scale, causal=causal, mask=mask, window=window, sinks=sinks,
                           softcap=softcap, max_score_bytes=max_score_bytes, return_lse=True)


def _dense_out(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    torch._check(q.dim() == 4 and v.dim() == 4, lambda: "[heed.attention] q and v must have rank 4")
    return q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]))


@_attention.register_fake
def _attention_fake(q, k, v, mask=None, sinks=None, **options):  # type: ignore[no-untyped-def]
    return _dense_out(q, v)


@_attention_lse.register_fake
def _attention_lse_fake(q, k, v, mask=None, sinks=None, **options):  # type: ignore[no-untyped-def]
    return _dense_out(q, v), _lse_like(q)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor] = None,
              sinks: Optional[torch.Tensor] = None, *, return_lse: bool = False, **options: Any) -> Any:
    """heed.attention on torch tensors (CPU or CUDA, on the current stream) through
    torch.ops.heed.attention; return_lse=True returns (out, lse [B, Hq, Lq] float32)."""
    lse = _flag(return_lse, "heed.torch.attention", "return_lse")
    if _direct(options, _DENSE_KEYWORDS, q, k, v, mask, sinks):
        return _heed_attention(q, k, v, mask=mask, sinks=sinks, return_lse=lse, **options)
    return (_attention_lse if lse else _attention)(q, k, v, mask, sinks, **options)


# --- ragged batches ---


@torch.library.custom_op("heed::attention_varlen", mutates_args=())
def _attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    sinks: Optional[torch.Tensor] = None,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
) -> torch.Tensor:
    """heed.attention_varlen on torch tensors, as a custom op: q [total_q, Hq, D], k and v
    [total_k, Hkv, D|Dv], cu_seqlens int32 [B + 1]; sinks may also be passed by position."""
    return _heed_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, scale=scale, causal=causal, window=window,
                                  sinks=sinks, softcap=softcap, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


@torch.library.custom_op("heed::attention_varlen_lse", mutates_args=())
def _attention_varlen_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    sinks: Optional[torch.Tensor] = None,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """heed.attention_varlen(..., return_lse=True) on torch tensors: (out, lse)."""
    return _heed_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, scale=scale, causal=causal, window=window,
                                  sinks=sinks, softcap=softcap, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                  return_lse=True)


def _rows_out(q: torch.Tensor, v: torch.Tensor, v_rank: int, op: str) -> torch.Tensor:
    torch._check(q.dim() == 3 and v.dim() == v_rank, lambda: f"[{op}] q must have rank 3 and v rank {v_rank}")
    return q.new_empty((q.shape[0], q.shape[1], v.shape[-1]))


@_attention_varlen.register_fake
def _attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=None, **options):  # type: ignore[no-untyped-def]
    return _rows_out(q, v, 3, "heed.attention_varlen")


@_attention_varlen_lse.register_fake
def _attention_varlen_lse_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=None, **options):  # type: ignore[no-untyped-def]
    return _rows_out(q, v, 3, "heed.attention_varlen"), _lse_like(q)


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, sinks: Optional[torch.Tensor] = None, *, return_lse: bool = False,
                     **options: Any) -> Any:
    """heed.attention_varlen on torch tensors through torch.ops.heed.attention_varlen;
    return_lse=True returns (out, lse [total_q, Hq] float32)."""
    lse = _flag(return_lse, "heed.torch.attention_varlen", "return_lse")
    if _direct(options, _SERVING_KEYWORDS, q, k, v, cu_seqlens_q, cu_seqlens_k, sinks):
        return _heed_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=sinks, return_lse=lse, **options)
    return (_attention_varlen_lse if lse else _attention_varlen)(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, **options)


# --- paged KV caches ---


@torch.library.custom_op("heed::attention_paged", mutates_args=())
def _attention_paged(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seqlens_k: torch.Tensor,
    cu_seqlens_q: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
) -> torch.Tensor:
    """heed.attention_paged on torch tensors, as a custom op: caches [num_pages, page_size, Hkv,
    D|Dv] (any strides), block_table int32 [B, max_pages], seqlens_k int32 [B]; cu_seqlens_q and
    sinks may also be passed by position."""
    return _heed_attention_paged(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q=cu_seqlens_q, scale=scale,
                                 causal=causal, window=window, sinks=sinks, softcap=softcap,
                                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


@torch.library.custom_op("heed::attention_paged_lse", mutates_args=())
def _attention_paged_lse(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seqlens_k: torch.Tensor,
    cu_seqlens_q: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """heed.attention_paged(..., return_lse=True) on torch tensors: (out, lse)."""
    return _heed_attention_paged(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q=cu_seqlens_q, scale=scale,
                                 causal=causal, window=window, sinks=sinks, softcap=softcap,
                                 max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, return_lse=True)


@_attention_paged.register_fake
def _attention_paged_fake(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q=None, sinks=None,  # type: ignore[no-untyped-def]
                          **options):
    return _rows_out(q, v_cache, 4, "heed.attention_paged")


@_attention_paged_lse.register_fake
def _attention_paged_lse_fake(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q=None, sinks=None,  # type: ignore[no-untyped-def]
                              **options):
    return _rows_out(q, v_cache, 4, "heed.attention_paged"), _lse_like(q)


def attention_paged(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                    seqlens_k: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor] = None,
                    sinks: Optional[torch.Tensor] = None, *, return_lse: bool = False, **options: Any) -> Any:
    """heed.attention_paged on torch tensors through torch.ops.heed.attention_paged;
    return_lse=True returns (out, lse) with out's shape less its last dimension."""
    lse = _flag(return_lse, "heed.torch.attention_paged", "return_lse")
    if _direct(options, _SERVING_KEYWORDS, q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, sinks):
        return _heed_attention_paged(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q=cu_seqlens_q,
                                     sinks=sinks, return_lse=lse, **options)
    op = _attention_paged_lse if lse else _attention_paged
    return op(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, sinks, **options)


# --- merging partial results ---


@torch.library.custom_op("heed::merge_states", mutates_args=())
def merge_states(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
                 lse_b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """heed.merge_states on torch tensors, as a custom op: (out, lse), both new."""
    return _heed_merge_states(out_a, lse_a, out_b, lse_b)


@merge_states.register_fake
def _merge_states_fake(out_a, lse_a, out_b, lse_b):  # type: ignore[no-untyped-def]
    torch._check(out_a.dim() >= 1, lambda: "[heed.merge_states] out_a must have rank >= 1")
    return out_a.new_empty(out_a.shape), _lse_like(out_a)
