"""The API reference in docs/api is generated from docstrings and must be current; every public
name of every package has a docstring."""

import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "ci" / "gen_api_docs.py")
gen_api_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen_api_docs)


@pytest.mark.parametrize(("dist", "module_name"), list(gen_api_docs.PACKAGES.items()))
def test_api_page_is_current(dist, module_name):
    pytest.importorskip(module_name)
    page = ROOT / "docs" / "api" / f"{dist}.md"
    assert page.exists(), f"run: python ci/gen_api_docs.py (missing {page.name})"
    assert page.read_text() == gen_api_docs.render(dist, module_name), (
        f"docs/api/{dist}.md is stale: run python ci/gen_api_docs.py"
    )


@pytest.mark.parametrize(("dist", "module_name"), list(gen_api_docs.PACKAGES.items()))
def test_every_public_name_has_a_docstring(dist, module_name):
    module = pytest.importorskip(module_name)
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        kind = gen_api_docs._kind(obj)
        if kind in ("class", "function") and not (getattr(obj, "__doc__", None) or "").strip():
            missing.append(name)
    assert not missing, f"{dist}: public names without a docstring: {missing}"


def test_readme_feature_table_matches_docs_comparison():
    readme = (ROOT / "README.md").read_text()
    comparison = [line for line in (ROOT / "docs" / "comparison.md").read_text().splitlines()
                  if line.startswith("|")]
    assert comparison, "docs/comparison.md has no table"
    for line in comparison:
        assert line in readme, f"README feature table differs from docs/comparison.md at: {line[:60]}"
