"""Each package builds an sdist, and the wheels that ci/setup.sh built and the tests ran against
carry the right version and dependencies (bounded ranges between siblings, nothing extra)."""

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"optree-core": "optree_core", "fused-optim": "fused_optim", "diffopt": "diffopt"}


def _version(dist: str) -> str:
    text = (ROOT / "packages" / dist / "src" / PACKAGES[dist] / "version.py").read_text()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def _wheel(dist: str) -> Path:
    wheels = sorted((ROOT / "dist" / "wheels").glob(f"{PACKAGES[dist]}-*.whl"))
    if not wheels:
        pytest.skip("no wheel: run ci/setup.sh first")
    return wheels[-1]


def _metadata(dist: str) -> str:
    with zipfile.ZipFile(_wheel(dist)) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        return wheel.read(name).decode()


@pytest.mark.parametrize("dist", list(PACKAGES))
def test_wheel_metadata(dist):
    meta = _metadata(dist)
    assert re.search(rf"^Version: {re.escape(_version(dist))}$", meta, re.M)
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]
    if dist == "optree-core":
        assert requires == [], "optree-core must have no runtime dependency"
    elif dist == "fused-optim":
        assert [r.split(">")[0].split("=")[0].strip() for r in requires] == ["torch"]
    else:
        names = {re.split(r"[<>=!~ ;]", r)[0] for r in requires}
        assert names == {"torch", "optree-core", "fused-optim"}
        for sibling in ("optree-core", "fused-optim"):
            spec = next(r for r in requires if r.startswith(sibling))
            assert ">=" in spec and "<" in spec and "==" not in spec, spec  # bounded, never ==


@pytest.mark.parametrize("dist", list(PACKAGES))
def test_wheel_contains_the_package(dist):
    with zipfile.ZipFile(_wheel(dist)) as wheel:
        names = wheel.namelist()
    assert f"{PACKAGES[dist]}/__init__.py" in names
    assert f"{PACKAGES[dist]}/version.py" in names
    if dist != "diffopt":
        assert any(n.startswith(f"{PACKAGES[dist]}/_C") and n.endswith(".so") for n in names)
        assert f"{PACKAGES[dist]}/py.typed" in names


@pytest.mark.parametrize("dist", list(PACKAGES))
def test_sdist_builds_with_sources(dist, tmp_path):
    pytest.importorskip("build")
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir",
                    str(tmp_path), str(ROOT / "packages" / dist)],
                   check=True, capture_output=True)
    [sdist] = tmp_path.glob("*.tar.gz")
    assert _version(dist) in sdist.name
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    for required in ("pyproject.toml", "README.md", "CHANGELOG.md",
                     f"src/{PACKAGES[dist]}/version.py"):
        assert required in names, f"{required} missing from the {dist} sdist"
    if dist != "diffopt":
        assert "CMakeLists.txt" in names
        assert any(n.startswith("csrc/") for n in names)
        assert not any(n.startswith("build/") for n in names), "build outputs leaked in"
