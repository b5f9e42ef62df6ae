"""Every ```python block of the package README runs as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = (
    re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S) if README.exists() else []
)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index):
    exec(compile(BLOCKS[index], f"README.md[block {index}]", "exec"), {"__name__": "__readme__"})


def test_readme_has_a_quick_start():
    assert BLOCKS, "the README must show runnable Python"
