"""The ``>>>`` examples in every public module's docstrings run and print what they say."""

import doctest
import importlib
import pkgutil

import pytest

import fused_optim.optim

# Every drop-in class's module (each has its example), found rather than listed so none is missed.
MODULES = ["fused_optim", "fused_optim.functional", "fused_optim.ops",
           *(f"fused_optim.optim.{m.name}" for m in pkgutil.iter_modules(fused_optim.optim.__path__)
             if not m.name.startswith("_"))]


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
    assert result.attempted > 0, f"{name} has no runnable examples"
