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

def attention_into(q: Any, k: Any, v: Any, out: Any, mask: Optional[Any], sinks: Optional[Any],
                   scale: Optional[float], causal: bool, window: Optional[int], max_score_bytes: Optional[int],
                   stream: int, bf16: int) -> None: ...
def plan_views(q: Any, k: Any, v: Any, mask: Optional[Any], sinks: Optional[Any], causal: bool,
               window: Optional[int], max_score_bytes: Optional[int], bf16: int) -> Plan: ...
def plan_shapes(q: List[int], k: List[int], v: List[int], dtype: str, device: str, mask: Optional[Any],
                sinks: Optional[Any], causal: bool, window: Optional[int], max_score_bytes: Optional[int],
                bf16: int) -> Plan: ...
def memory_stats(device: str) -> MemoryStats: ...
def reset_peak(device: str) -> None: ...
def last_call() -> Dict[str, Union[int, str]]:
    """The data pointers, device and stream heed saw in this thread's last attention call."""
