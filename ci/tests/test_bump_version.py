"""ci/bump_version.py changes exactly one package's version.py and CHANGELOG."""

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bump_version", ROOT / "ci" / "bump_version.py")
bump_version = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bump_version)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    pkg = tmp_path / "packages" / "optree-core"
    (pkg / "src" / "optree_core").mkdir(parents=True)
    (pkg / "src" / "optree_core" / "version.py").write_text('"""v"""\n\n__version__ = "0.1.0"\n')
    (pkg / "CHANGELOG.md").write_text("# Changelog\n\n## 0.1.0\n\n- first\n")
    monkeypatch.setattr(bump_version, "ROOT", tmp_path)
    return pkg


@pytest.mark.parametrize(("spec", "expected"), [("patch", "0.1.1"), ("minor", "0.2.0"),
                                                ("major", "1.0.0"), ("0.3.4", "0.3.4")])
def test_bump(repo, spec, expected):
    assert bump_version.main(["optree-core", spec]) == 0
    version = (repo / "src" / "optree_core" / "version.py").read_text()
    assert f'__version__ = "{expected}"' in version
    changelog = (repo / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog\n")
    assert changelog.index(f"## {expected}") < changelog.index("## 0.1.0")


def test_refuses_older_or_malformed_versions(repo):
    with pytest.raises(SystemExit):
        bump_version.main(["optree-core", "0.0.9"])
    with pytest.raises(SystemExit):
        bump_version.main(["optree-core", "1.0"])
    assert '"0.1.0"' in (repo / "src" / "optree_core" / "version.py").read_text()


def test_real_packages_have_one_version_string():
    for package in bump_version.IMPORT_NAMES:
        pkg = ROOT / "packages" / package
        if not pkg.exists():
            continue
        hits = [p for p in pkg.rglob("*") if p.is_file() and p.suffix in {".py", ".toml", ".txt"}
                and "build" not in p.parts and bump_version.VERSION_RE.search(p.read_text(errors="ignore"))]
        assert [p.name for p in hits] == ["version.py"], hits
        assert shutil.which("git") is not None
