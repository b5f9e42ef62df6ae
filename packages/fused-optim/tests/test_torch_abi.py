"""Which torch fused-optim loads into (src/fused_optim/_torch_abi.py): the ops (``_C``, torch's
stable ABI) into every torch from 2.10 on, the unboxed fast path (``_eager``) only into the torch
release it was compiled against; the wheel's requirement says ``torch>=2.10``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import fused_optim
from fused_optim import _native, _torch_abi
from fused_optim._built_against import TORCH_VERSION

PYPROJECT = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_build_records_the_torch_compiled_against_once():
    # Two records of the same fact, one readable before the library loads: they must agree.
    assert fused_optim.BUILD_INFO["torch_version"] == TORCH_VERSION
    assert fused_optim.BUILD_INFO["torch_abi"] == f"stable, torch >= {_torch_abi.MIN_TORCH}"


@pytest.mark.parametrize(("version", "release"), [("2.13.0+cpu", "2.13"), ("2.13.1", "2.13"),
                                                  ("2.14.0a0+git1234", "2.14"), ("3.0", "3.0")])
def test_torch_release(version, release):
    assert _torch_abi.torch_release(version) == release


@pytest.mark.parametrize("running", ["2.10.0", "2.11.0+cu130", "2.13.0+cpu", "2.14.1", "2.20.0a0+git1", "3.0.0"])
def test_every_torch_from_the_stable_abi_target_on_passes(running):
    _torch_abi.check_torch(running, "0.1.0")


@pytest.mark.parametrize("running", ["2.9.1", "2.4.0+cu121", "1.13.1"])
def test_an_older_torch_raises_with_both_versions(running):
    with pytest.raises(ImportError) as info:
        _torch_abi.check_torch(running, "0.1.0")
    message = str(info.value)
    assert f"torch {running} is running" in message and "needs torch 2.10 or later" in message
    assert "pip install 'torch>=2.10'" in message


@pytest.mark.parametrize(("built", "running", "matches"), [
    ("2.13.0+cpu", "2.13.0+cpu", True), ("2.13.0+cpu", "2.13.1+cu130", True),
    ("2.13.0+cpu", "2.14.1", False), ("2.13.0+cpu", "2.12.0", False)])
def test_the_fast_path_serves_only_the_release_it_was_compiled_against(built, running, matches):
    # Patch releases and CPU/CUDA variants of one release share its C++ ABI.
    assert _torch_abi.eager_matches(built, running) is matches


def _import_under(version: str, tmp_path: pathlib.Path, then: str = "") -> dict:
    # What a user sees with another torch under an installed wheel: the running torch reports
    # that release before fused_optim is imported.
    code = f"""
import json, sys, torch
torch.__version__ = {version!r}
out = {{}}
try:
    import fused_optim
    from fused_optim import _native
    out["eager"] = fused_optim.BUILD_INFO["eager"]
    out["reason"] = _native.EAGER_REASON
{then}
except ImportError as error:
    out["error"], out["type"] = str(error), type(error).__name__
out["loaded"] = sorted(m for m in sys.modules if m.startswith("fused_optim"))
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if k != "FUSED_OPTIM_EAGER"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True,
                            env=env)
    return json.loads(result.stdout)


def test_import_under_an_older_torch_raises_before_the_library_loads(tmp_path):
    outcome = _import_under("2.9.1", tmp_path)
    assert outcome["type"] == "ImportError"
    assert "torch 2.9.1 is running" in outcome["error"]
    assert "fused_optim._C" not in outcome["loaded"] and "fused_optim" not in outcome["loaded"]


def test_under_another_release_the_ops_run_without_the_fast_path(tmp_path):
    # The stable build's ops under a torch that the fast path was not compiled for: an SGD step
    # through torch.ops, with the version counter bumped by the Python side (_native.boxed).
    then = """
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    p.grad = torch.tensor([0.5, -1.0])
    version = p._version
    fused_optim.SGD([p], lr=0.5).step()
    out["p"], out["bumped"] = p.tolist(), p._version > version
"""
    outcome = _import_under("2.99.1", tmp_path, then)
    assert outcome["eager"] is False
    assert f"compiled against torch {TORCH_VERSION}, torch 2.99.1 is running" in outcome["reason"]
    assert "fused_optim._eager" not in outcome["loaded"]
    assert outcome["p"] == [0.75, 2.5] and outcome["bumped"] is True


def test_the_fast_path_is_on_where_it_matches():
    # CI builds it against the torch it tests with; FUSED_OPTIM_EAGER=0 turns it off; under
    # another release (CI's second torch) it stays off.
    if _native.EAGER_REASON == "turned off by FUSED_OPTIM_EAGER=0":
        assert fused_optim.BUILD_INFO["eager"] is False
    elif _torch_abi.eager_matches(TORCH_VERSION, torch.__version__):
        assert fused_optim.BUILD_INFO["eager"] is True, _native.EAGER_REASON
    else:
        assert fused_optim.BUILD_INFO["eager"] is False
        assert f"torch {torch.__version__} is running" in _native.EAGER_REASON


def test_installed_metadata_and_pyproject_require_the_stable_abi_target():
    requires = [r for r in importlib.metadata.requires("fused-optim") or [] if "extra ==" not in r]
    assert requires == [_torch_abi.torch_requirement()] == [f"torch>={_torch_abi.MIN_TORCH}"]
    assert f'dependencies = ["torch>={_torch_abi.MIN_TORCH}"]' in PYPROJECT.read_text()
