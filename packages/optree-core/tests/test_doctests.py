"""The ``>>>`` examples in every public module's docstrings run and print what they say."""

import doctest
import importlib

import pytest

MODULES = [
    "optree_core",
    "optree_core._C",  # PyTreeSpec and PyTreeKind carry their docs in csrc/module.cpp
    "optree_core.ops",
    "optree_core.accessors",
    "optree_core.registry",
    "optree_core.typing",
    "optree_core.dataclasses",
    "optree_core.functools",
    "optree_core.utils",
    "optree_core.integrations.torch",
    "optree_core.integrations.numpy",
    "optree_core.integrations.attrs",
    "optree_core.pytree",
    "optree_core.treespec",
]


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    if name.endswith(".torch"):
        pytest.importorskip("torch")
    if name.endswith(".numpy"):
        pytest.importorskip("numpy")
    if name.endswith(".attrs"):
        pytest.importorskip("attrs")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
    assert result.attempted > 0, f"{name} has no runnable examples"
