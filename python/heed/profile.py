"""heed's profiler, the C++ one: with mode 'shapes' every kernel dispatch is recorded as
"name [x, y, z]" (its grid) with a count; 'time' adds the summed durations. The mode starts
from the HEED_PROFILE environment variable ('off' when unset).

    heed.profile.set_mode("shapes")
    heed.attention(q, k, v)
    print(heed.profile.report())     # heed_cpu_tiled_f32 [2, 8, 1] x1
"""

from __future__ import annotations

from typing import List, Tuple

from ._heed import profile as _profile

__all__ = ["mode", "set_mode", "reset", "entries", "records", "report"]


def mode() -> str:
    """'off', 'shapes' or 'time'."""
    return _profile.mode()


def set_mode(mode: str) -> None:
    """'off', 'shapes' or 'time'; overrides HEED_PROFILE."""
    _profile.set_mode(mode)


def reset() -> None:
    """Forgets every recorded dispatch."""
    _profile.reset()


def entries() -> List[Tuple[str, int]]:
    """Dispatches in first-seen order: ("name [x, y, z]", count)."""
    return _profile.entries()


def records() -> List[Tuple[str, int, float]]:
    """("name [x, y, z]", count, summed seconds); seconds are 0 unless the mode is 'time'."""
    return _profile.records()


def report() -> str:
    """One line per entry: "name [x, y, z] xCOUNT", with milliseconds in 'time' mode."""
    return _profile.report()
