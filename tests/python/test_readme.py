"""The README's Python snippet runs as written and does what it says."""

from __future__ import annotations

import pathlib

import numpy as np

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def python_blocks(text: str):
    blocks, inside = [], None
    for line in text.splitlines():
        if inside is None and line.strip() == "```python":
            inside = []
        elif inside is not None and line.strip() == "```":
            blocks.append("\n".join(inside))
            inside = None
        elif inside is not None:
            inside.append(line)
    return blocks


def test_readme_snippet(capsys):
    blocks = python_blocks(README.read_text())
    assert blocks, "README.md has no ```python block"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    out = namespace["out"]
    assert isinstance(out, np.ndarray) and out.shape == (1, 8, 128, 64) and out.dtype == np.float32
    printed = capsys.readouterr().out
    # The explanation, then a kernel name (of the default device: the CPU, or cuda:0 on a GPU machine).
    assert "route " in printed and ("heed_cpu_" in printed or "heed_cuda_" in printed)
