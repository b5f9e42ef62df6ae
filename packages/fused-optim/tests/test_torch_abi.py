"""``import fused_optim`` refuses a torch release other than the one it was compiled against, and
the wheel's requirement names that release (src/fused_optim/_torch_abi.py)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest
import torch

import fused_optim
from fused_optim import _torch_abi
from fused_optim._built_against import TORCH_VERSION


def test_the_build_records_the_running_torch_once():
    # Two records of the same fact, one readable before the library loads: they must agree.
    assert TORCH_VERSION == fused_optim.BUILD_INFO["torch_version"] == torch.__version__


@pytest.mark.parametrize(("version", "release"), [("2.13.0+cpu", "2.13"), ("2.13.1", "2.13"),
                                                  ("2.14.0a0+git1234", "2.14"), ("3.0", "3.0")])
def test_torch_release(version, release):
    assert _torch_abi.torch_release(version) == release
    assert _torch_abi.torch_requirement(version) == f"torch=={release}.*"


@pytest.mark.parametrize("running", ["2.13.0+cpu", "2.13.1", "2.13.0+cu130", "2.13.2+rocm7.0"])
def test_same_release_passes(running):
    # Patch releases and CPU/CUDA variants of one release share its C++ ABI.
    _torch_abi.check_torch("2.13.0+cpu", running, "0.1.0")


@pytest.mark.parametrize("running", ["2.12.1", "2.14.0", "3.13.0"])
def test_other_release_raises_with_both_versions_and_the_fix(running):
    with pytest.raises(ImportError) as info:
        _torch_abi.check_torch("2.13.0+cpu", running, "0.1.0")
    message = str(info.value)
    assert "compiled against torch 2.13.0+cpu" in message and f"torch {running} is running" in message
    assert "pip install 'torch==2.13.*'" in message
    assert ("pip install --force-reinstall --no-deps --no-build-isolation --no-binary fused-optim "
            "fused-optim==0.1.0") in message


def test_import_under_another_torch_raises_before_the_library_loads(tmp_path):
    # What a user sees after upgrading torch under an installed wheel: the running torch reports
    # another release. The check must fire before _C is loaded (a mismatched _C may not load at
    # all, or crash), and nothing half-imported may stay behind.
    code = """
import json, sys, torch
torch.__version__ = "2.99.1"
try:
    import fused_optim
except ImportError as error:
    print(json.dumps({"error": str(error), "type": type(error).__name__,
                      "loaded": sorted(m for m in sys.modules if m.startswith("fused_optim"))}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path, check=True)
    outcome = json.loads(result.stdout)
    assert outcome["type"] == "ImportError"
    assert f"compiled against torch {TORCH_VERSION}, but torch 2.99.1 is running" in outcome["error"]
    assert "--no-build-isolation" in outcome["error"]
    assert "fused_optim._C" not in outcome["loaded"]
    assert "fused_optim" not in outcome["loaded"]


def test_installed_metadata_requires_the_release_built_against():
    requires = [r for r in importlib.metadata.requires("fused-optim") or [] if "extra ==" not in r]
    assert requires == [_torch_abi.torch_requirement(TORCH_VERSION)]
