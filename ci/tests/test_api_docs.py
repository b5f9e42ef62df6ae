"""The API reference in docs/api is generated from docstrings and must be current, and every
public class and function it documents carries a usable docstring.

The rule, for each class and function a page documents in full (top level and public
submodules; see ci/gen_api_docs.py for which those are):

* it has a docstring;
* the docstring has an example: a ``>>>`` line (the packages' doctest tests run them);
* every user-facing parameter is described under ``Args:``: a ``name:`` (or
  ``name (type):``) line per parameter, or one line for several that share a description
  (``lr, betas: as in torch.optim.Adam``). A class's parameters are its constructor's (without
  ``self``, as ``inspect.signature`` reports them). Not user-facing: ``_private`` names and
  ``*args``/``**kwargs`` (forwarded or free-form), so a callable taking only those needs no
  ``Args:`` section. NamedTuples and
  dataclasses may say ``Attributes:`` instead, their parameters being their fields. Enum classes
  are exempt from ``Args:``, their constructor being a value lookup. A callable whose signature
  Python cannot inspect (an extension class with no constructor) has no parameters to describe.

Exempt from all three: type aliases and constants. They are values that cannot carry a
docstring of their own (subscripting a typing alias makes a new object), so the page prints
their definition, and the defining module's docstring explains them.
"""

import dataclasses
import enum
import importlib
import importlib.util
import inspect
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "ci" / "gen_api_docs.py")
gen_api_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen_api_docs)

_SKIPPED_KINDS = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _parameters(obj):
    """The user-facing parameter names of a callable or class constructor."""
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return []
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [p.name for p in signature.parameters.values()
            if p.kind not in _SKIPPED_KINDS and not p.name.startswith("_")]


def _section(doc, title):
    """The lines of a Google-style ``title:`` section (more indented than its title)."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == title:
            indent = len(line) - len(line.lstrip())
            body = []
            for item in lines[i + 1:]:
                if item.strip() and len(item) - len(item.lstrip()) <= indent:
                    break
                body.append(item)
            return body
    return None


def _described(doc, obj):
    titles = ["Args:"]
    if inspect.isclass(obj) and (dataclasses.is_dataclass(obj) or
                                 (issubclass(obj, tuple) and hasattr(obj, "_fields"))):
        titles.append("Attributes:")
    names = set()
    for title in titles:
        for line in _section(doc, title) or []:
            match = re.match(r"\s*(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(\([^)]*\))?\s*:", line)
            if match:
                names.update(name.strip().lstrip("*") for name in match.group(1).split(","))
    return names


def docstring_problems(obj):
    """What the rule above finds missing in ``obj``'s docstring (empty when it passes)."""
    doc = inspect.getdoc(obj) or ""
    if not doc.strip():
        return ["no docstring"]
    problems = []
    if not any(line.lstrip().startswith(">>>") for line in doc.splitlines()):
        problems.append("no >>> example")
    undescribed = [name for name in _parameters(obj) if name not in _described(doc, obj)]
    if undescribed:
        problems.append("Args: misses " + ", ".join(undescribed))
    return problems


def _offenders(package):
    offenders = []
    for entry in gen_api_docs.documented_entries(package):
        if gen_api_docs._kind(entry.obj) not in ("class", "function"):
            continue
        problems = docstring_problems(entry.obj)
        if problems:
            offenders.append(f"{entry.qualname}: {'; '.join(problems)}")
    return offenders


@pytest.mark.parametrize(("dist", "module_name"), list(gen_api_docs.PACKAGES.items()))
def test_api_page_is_current(dist, module_name):
    pytest.importorskip(module_name)
    page = ROOT / "docs" / "api" / f"{dist}.md"
    assert page.exists(), f"run: python ci/gen_api_docs.py (missing {page.name})"
    assert page.read_text() == gen_api_docs.render(dist, module_name), (
        f"docs/api/{dist}.md is stale: run python ci/gen_api_docs.py"
    )


@pytest.mark.parametrize(("dist", "module_name"), list(gen_api_docs.PACKAGES.items()))
def test_every_public_name_has_args_and_an_example(dist, module_name):
    pytest.importorskip(module_name)
    offenders = _offenders(module_name)
    assert not offenders, (f"{dist}: {len(offenders)} public name(s) break the docstring rule "
                           "(see this test's module docstring):\n" + "\n".join(offenders))


def _fake_package(name, **members):
    module = types.ModuleType(name)
    module.__dict__.update(members)
    module.__all__ = list(members)
    for member in members.values():
        if callable(member):
            member.__module__ = name
    return module


def test_the_rule_flags_each_missing_part(monkeypatch):
    def documented(x, *, scale=1.0):
        """Scale ``x``.

        Args:
            x, scale (float): The value and its factor.

        >>> documented(2, scale=3)
        6
        """
        return x * scale

    def no_example(x):
        """Return nothing.

        Args:
            x: The value.
        """

    def undescribed_keyword(x, *, scale=1.0):
        """Return nothing.

        Args:
            x: The value.

        >>> undescribed_keyword(1)
        """

    def forwarding(*args, **kwargs):
        """Forwards everything.

        >>> forwarding()
        """

    def bare():
        pass

    package = _fake_package("fake_pkg", documented=documented, no_example=no_example,
                            undescribed_keyword=undescribed_keyword, forwarding=forwarding,
                            bare=bare)
    monkeypatch.setitem(importlib.sys.modules, "fake_pkg", package)
    assert _offenders("fake_pkg") == [
        "fake_pkg.no_example: no >>> example",
        "fake_pkg.undescribed_keyword: Args: misses scale",
        "fake_pkg.bare: no docstring",
    ]


def test_readme_feature_table_matches_docs_comparison():
    readme = (ROOT / "README.md").read_text()
    comparison = [line for line in (ROOT / "docs" / "comparison.md").read_text().splitlines()
                  if line.startswith("|")]
    assert comparison, "docs/comparison.md has no table"
    for line in comparison:
        assert line in readme, f"README feature table differs from docs/comparison.md at: {line[:60]}"
