"""Run the ``>>>`` examples in the docstrings of every diffopt module.

That every public name has such an example and an ``Args:`` section is checked for all three
packages at once by ci/tests/test_api_docs.py.
"""

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


# The distributed examples start a one-worker RPC world; torch's own shutdown path warns about
# a Gloo deprecation it triggers itself, which says nothing about diffopt.
@pytest.mark.filterwarnings("ignore:You are using a Backend:UserWarning")
@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name, globs=dict(vars(module))):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
