"""Build metadata: _C.BUILD_INFO is what bug reports print, and the package has no runtime deps."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap

import pytest

import optree_core


def _build_info():
    from optree_core import _C

    return _C.BUILD_INFO


def test_build_info_is_a_non_empty_mapping_or_string():
    info = _build_info()
    assert info, "BUILD_INFO must not be empty"
    text = str(info)
    # Names the compiler and the C++ standard it was built with.
    assert any(c in text.lower() for c in ("gcc", "g++", "clang", "msvc", "compiler")), text


def test_build_info_mentions_cxx_standard():
    text = str(_build_info()).lower()
    assert "17" in text or "c++" in text or "cxx" in text, text


def test_version_matches_distribution_metadata():
    try:
        dist_version = importlib.metadata.version("optree-core")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("optree-core is not installed as a distribution (in-tree run)")
    assert optree_core.__version__ == dist_version


def test_distribution_declares_no_runtime_dependency():
    try:
        requires = importlib.metadata.requires("optree-core") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("optree-core is not installed as a distribution (in-tree run)")
    runtime = [r for r in requires if "extra ==" not in r]
    assert runtime == []


def test_import_loads_neither_torch_nor_numpy():
    code = textwrap.dedent(
        """
        import sys
        import optree_core
        optree_core.tree_map(lambda x: x, {"a": [1, 2]})
        import optree_core.dataclasses, optree_core.functools
        print(sorted(m for m in ("torch", "numpy", "optree") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_max_recursion_depth_is_exposed():
    assert isinstance(optree_core.MAX_RECURSION_DEPTH, int)
    assert optree_core.MAX_RECURSION_DEPTH >= 500
