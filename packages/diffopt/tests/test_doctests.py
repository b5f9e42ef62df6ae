"""Run the ``>>>`` examples in the docstrings of every diffopt module this core owns."""

import doctest
import importlib
import pkgutil

import pytest

import diffopt


def _modules():
    names = []
    for info in pkgutil.walk_packages(diffopt.__path__, prefix="diffopt."):
        names.append(info.name)
    return ["diffopt", *sorted(names)]


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name, globs=dict(vars(module))):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
