"""Type stubs of heed's nanobind module (python/src/heed_ext.cpp). Use the `heed` package."""

from typing import Any, Dict, List, Optional, Tuple, Union

class _Profile:
    """The submodule _heed.profile (heed.profile wraps it)."""

    def mode(self) -> str: ...
    def set_mode(self, mode: str) -> None: ...
    def reset(self) -> None: ...
    def entries(self) -> List[Tuple[str, int]]: ...
    def records(self) -> List[Tuple[str, int, float]]: ...
    def report(self) -> str: ...

profile: _Profile

class Plan:
    """The plan of one attention call: the kernel, its scratch and why."""

    @property
    def device(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def route(self) -> str:
        """'vector', 'tiled', 'composed' or 'composed_blocks'."""
    @property
    def kernel(self) -> Dict[str, Union[str, int]]:
        """{'route': ..., and the route's blocking: passes/blocks/dispatches, block_q/block_k or rows}."""
    @property
    def kernel_name(self) -> str:
        """The profiler's name of the main dispatch, e.g. 'heed_cpu_tiled_bf16'."""
    @property
    def workers(self) -> int: ...
    @property
    def scratch_bytes(self) -> int:
        """The peak bytes heed holds during the call."""
    @property
    def max_intermediate_bytes(self) -> int: ...
    @property
    def capped(self) -> bool: ...
    @property
    def buffers(self) -> List[Dict[str, Union[str, int]]]:
        """The layout of scratch_bytes: name, offset, bytes, slices."""
    @property
    def reasons(self) -> List[str]: ...
    def explain(self) -> str:
        """One line per decision, with the numbers that drove it."""
    def to_json(self) -> str: ...
    def __eq__(self, other: object) -> bool: ...

class MemoryStats:
    """Bytes heed itself holds on a device."""

    @property
    def active(self) -> int: ...
    @property
    def peak(self) -> int: ...
    @property
    def cached(self) -> int: ...

def attention_into(q: Any, k: Any, v: Any, out: Any, mask: Optional[Any], sinks: Optional[Any],
                   scale: Optional[float], causal: bool, window: Optional[int], softcap: Optional[float],
                   max_score_bytes: Optional[int], stream: int, bf16: int, route: str = "auto",
                   workspace: Optional[Any] = None, max_scratch_bytes: Optional[int] = None,
                   lse: Optional[Any] = None) -> None: ...
def attention_varlen_into(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, out: Any,
                          lse: Optional[Any], sinks: Optional[Any], scale: Optional[float], causal: bool,
                          window: Optional[int], softcap: Optional[float], max_seqlen_q: Optional[int],
                          max_seqlen_k: Optional[int], stream: int, bf16: int, route: str = "auto",
                          workspace: Optional[Any] = None, max_scratch_bytes: Optional[int] = None) -> None: ...
def attention_paged_into(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seqlens_k: Any,
                         cu_seqlens_q: Optional[Any], out: Any, lse: Optional[Any], sinks: Optional[Any],
                         scale: Optional[float], causal: bool, window: Optional[int], softcap: Optional[float],
                         max_seqlen_q: Optional[int], max_seqlen_k: Optional[int], stream: int, bf16: int,
                         route: str = "auto", workspace: Optional[Any] = None,
                         max_scratch_bytes: Optional[int] = None) -> None: ...
def plan_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, sinks: Optional[Any], causal: bool,
                window: Optional[int], softcap: Optional[float], max_seqlen_q: Optional[int],
                max_seqlen_k: Optional[int], bf16: int, route: str = "auto",
                max_scratch_bytes: Optional[int] = None) -> Plan: ...
def plan_paged(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seqlens_k: Any, cu_seqlens_q: Optional[Any],
               sinks: Optional[Any], causal: bool, window: Optional[int], softcap: Optional[float],
               max_seqlen_q: Optional[int], max_seqlen_k: Optional[int], bf16: int, route: str = "auto",
               max_scratch_bytes: Optional[int] = None) -> Plan: ...
def merge_states_into(out_a: Any, lse_a: Any, out_b: Any, lse_b: Any, out: Any, lse: Any, stream: int,
                      bf16: int) -> None: ...
def plan_views(q: Any, k: Any, v: Any, mask: Optional[Any], sinks: Optional[Any], causal: bool,
               window: Optional[int], softcap: Optional[float], max_score_bytes: Optional[int], bf16: int,
               route: str = "auto", max_scratch_bytes: Optional[int] = None) -> Plan: ...
def plan_shapes(q: List[int], k: List[int], v: List[int], dtype: str, device: str, mask: Optional[Any],
                sinks: Optional[Any], causal: bool, window: Optional[int], softcap: Optional[float],
                max_score_bytes: Optional[int], bf16: int, route: str = "auto",
                max_scratch_bytes: Optional[int] = None) -> Plan: ...
def memory_stats(device: str) -> MemoryStats: ...
def reset_peak(device: str) -> None: ...
def empty_cache(device: str) -> int: ...
def cache_limit(device: str) -> int: ...
def set_cache_limit(bytes: int, device: str) -> None: ...
def last_call() -> Dict[str, Union[int, str]]:
    """The data pointers (q, k, v, out, mask, sinks, lse), device and stream heed saw in this
    thread's last attention call of any form (a paged call's caches as k and v)."""

class LayerPlan:
    """The plan of one encoder-layer call: its workspace and why."""

    @property
    def attention(self) -> Plan: ...
    @property
    def workers(self) -> int: ...
    @property
    def block_rows(self) -> int: ...
    @property
    def workspace_bytes(self) -> int: ...
    @property
    def buffers(self) -> List[Dict[str, Union[str, int]]]:
        """The layout of workspace_bytes: name, offset, bytes."""
    @property
    def reasons(self) -> List[str]: ...
    def explain(self) -> str: ...

class MultiHeadAttention:
    """heed::MultiHeadAttention; use heed.MultiHeadAttention."""

    def __init__(self, hidden: int, q_heads: int, kv_heads: int, head_dim: int, scale: Optional[float],
                 q_weight: Any, k_weight: Any, v_weight: Any, out_weight: Any, q_bias: Optional[Any],
                 k_bias: Optional[Any], v_bias: Optional[Any], out_bias: Optional[Any]) -> None: ...
    @property
    def scale(self) -> float: ...
    @property
    def device(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    def plan(self, batch: int, length: int, key_padding: bool) -> LayerPlan: ...
    def forward_into(self, hidden: Any, key_padding_mask: Optional[Any], out: Any, stream: int) -> None: ...

def last_layer_call() -> Dict[str, Union[int, str]]:
    """The data pointers, device and stream heed saw in this thread's last layer call."""

class Runner:
    """A call planned once and run many times (heed/runner.hpp); heed.Runner wraps it."""

    @property
    def plan(self) -> Plan: ...
    def run(self, stream: int) -> None: ...
    def update_metadata(self, stream: int) -> None: ...

def runner_dense(q: Any, k: Any, v: Any, out: Any, mask: Optional[Any], sinks: Optional[Any], scale: Optional[float],
                 causal: bool, window: Optional[int], softcap: Optional[float], max_score_bytes: Optional[int],
                 stream: int, bf16: int, route: str = "auto", workspace: Optional[Any] = None,
                 max_scratch_bytes: Optional[int] = None, lse: Optional[Any] = None) -> Runner: ...
def runner_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, out: Any, lse: Optional[Any],
                  sinks: Optional[Any], scale: Optional[float], causal: bool, window: Optional[int],
                  softcap: Optional[float], max_seqlen_q: Optional[int], max_seqlen_k: Optional[int], stream: int,
                  bf16: int, route: str = "auto", workspace: Optional[Any] = None,
                  max_scratch_bytes: Optional[int] = None) -> Runner: ...
def runner_paged(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seqlens_k: Any, cu_seqlens_q: Optional[Any],
                 out: Any, lse: Optional[Any], sinks: Optional[Any], scale: Optional[float], causal: bool,
                 window: Optional[int], softcap: Optional[float], max_seqlen_q: Optional[int],
                 max_seqlen_k: Optional[int], stream: int, bf16: int, route: str = "auto",
                 workspace: Optional[Any] = None, max_scratch_bytes: Optional[int] = None) -> Runner: ...
