"""Every ```python block of the package README runs as written, each in a fresh interpreter.

A fresh process per block: a block may change interpreter-wide state (``install_as_optree``
aliases ``optree`` in ``sys.modules``), which must not leak into the other tests. Blocks that use
torch are skipped where torch is not installed (this suite also runs in a venv without it).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = (
    re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S) if README.exists() else []
)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index):
    block = BLOCKS[index]
    if re.search(r"^\s*(import|from) torch\b", block, flags=re.M):
        pytest.importorskip("torch")
    run = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"README block {index} failed:\n{run.stderr[-4000:]}"


def test_readme_has_a_quick_start():
    assert BLOCKS, "the README must show runnable Python"
