"""Every ```python block of the docs and of the fused-optim and diffopt READMEs runs as written.

Covered: ``docs/**/*.md``, ``packages/fused-optim/README.md``, ``packages/diffopt/README.md``
(optree-core's README has its own test, ``packages/optree-core/tests/test_readme.py``).

Each block runs on its own, in a fresh namespace, in a temporary working directory, after
``torch.manual_seed(0)``: a block must be complete (imports and data included), as a reader
would paste it. Blocks should ``assert`` what they claim.

Skip marker: a fence opened as ```` ```python no-run <reason> ```` is not run (the reason is
reported). Use it only for fragments that need a GPU or a cluster. Other languages (```bash...)
are never run.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_READMES = [
    ROOT / "packages" / "fused-optim" / "README.md",
    ROOT / "packages" / "diffopt" / "README.md",
]
SKIP_MARKER = "no-run"
FENCE = re.compile(r"^(?P<indent>[ ]{0,3})```(?P<info>[^`\n]*)$")


def doc_files() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md")) + PACKAGE_READMES


def python_blocks(path: Path) -> list[tuple[int, str, str]]:
    """``(first line number, info string, code)`` of each ```python block of a Markdown file."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        info = opening["info"].strip()
        body = []
        index += 1
        while index < len(lines) and lines[index].strip() != "```":
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise AssertionError(f"{path.relative_to(ROOT)}: unclosed code fence")
        if info.split()[:1] == ["python"]:
            start = index - len(body) + 1  # 1-based line of the block's first code line
            # A fence indented inside a list item indents its code too.
            code = textwrap.dedent("\n".join(body)) + "\n"
            blocks.append((start, info, code))
        index += 1
    return blocks


def _cases():
    for path in doc_files():
        relative = path.relative_to(ROOT).as_posix()
        for line, info, code in python_blocks(path):
            words = info.split()
            marks = []
            if SKIP_MARKER in words:
                reason = " ".join(words[words.index(SKIP_MARKER) + 1:]) or "marked no-run"
                marks.append(pytest.mark.skip(reason=f"{relative}:{line}: {reason}"))
            yield pytest.param(relative, line, code, id=f"{relative}:{line}", marks=marks)


@pytest.mark.parametrize(("relative", "line", "code"), list(_cases()))
def test_python_block_runs(relative, line, code, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    dtype, grad_enabled = torch.get_default_dtype(), torch.is_grad_enabled()
    namespace = {"__name__": "__main__"}
    try:
        # Compiled with the Markdown file's name and line numbers so a failure points at the doc.
        exec(compile("\n" * (line - 1) + code, str(ROOT / relative), "exec"), namespace)
    finally:
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad_enabled)


EXPECTED_DOCS = [
    "docs/comparison.md",
    "docs/migration/from_higher.md",
    "docs/migration/from_optree.md",
    "docs/migration/from_torch_optim.md",
    "docs/migration/from_torchopt.md",
]


@pytest.mark.parametrize("relative", EXPECTED_DOCS)
def test_doc_exists(relative):
    assert (ROOT / relative).is_file(), f"{relative} is missing"


@pytest.mark.parametrize("relative", [d for d in EXPECTED_DOCS if "migration" in d])
def test_migration_guide_has_a_runnable_example(relative):
    blocks = python_blocks(ROOT / relative)
    assert any(SKIP_MARKER not in info.split() for _, info, _ in blocks), (
        f"{relative} has no runnable ```python block"
    )


LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    text = path.read_text(encoding="utf-8")
    broken = [
        target
        for target in (m["target"] for m in LINK.finditer(text))
        if "://" not in target and not target.startswith("mailto:")
        and not (path.parent / target).exists()
    ]
    assert not broken, f"{path.relative_to(ROOT)}: links to missing files {broken}"


def test_fence_parser_finds_blocks_and_skip_marker(tmp_path):
    sample = tmp_path / "sample.md"
    sample.write_text(
        "text\n```python\nx = 1\n```\n```bash\nls\n```\n```python no-run needs a GPU\ny\n```\n"
        "- item\n  ```python\n  if x:\n      z = 2\n  ```\n"
    )
    blocks = python_blocks(sample)
    assert [(line, info, code) for line, info, code in blocks] == [
        (3, "python", "x = 1\n"),
        (9, "python no-run needs a GPU", "y\n"),
        (13, "python", "if x:\n    z = 2\n"),
    ]
