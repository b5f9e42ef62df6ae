"""The ``>>>`` examples in every public module's docstrings run and print what they say."""

import doctest
import importlib

import pytest

MODULES = [
    "fused_optim",
    "fused_optim.functional",
    "fused_optim.ops",
    "fused_optim.optim.adadelta",
    "fused_optim.optim.adagrad",
    "fused_optim.optim.adam",
    "fused_optim.optim.adamax",
    "fused_optim.optim.adamw",
    "fused_optim.optim.adan",
    "fused_optim.optim.lion",
    "fused_optim._reference",
    "fused_optim.optim.radam",
    "fused_optim.optim.rmsprop",
    "fused_optim.optim.sgd",
]


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
    assert result.attempted > 0, f"{name} has no runnable examples"
