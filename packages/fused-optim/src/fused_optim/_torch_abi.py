"""The torch release fused-optim's compiled ops load into: the wheel's pin and the import check.

A compiled torch extension only loads into the torch release it was built against (torch's C++
API and ABI change between minor releases; that is how TorchOpt 0.7.3's compiled op silently
stopped loading under a newer torch). So the wheel requires that release (``torch==2.13.*``,
torchvision's convention), and ``import fused_optim`` compares the running torch with the one the
build recorded before the library loads, raising an ``ImportError`` that says what to do instead
of an undefined-symbol message or a crash.

This module is also scikit-build-core's metadata provider for the wheel's ``dependencies``
(``[[tool.dynamic-metadata]]`` in pyproject.toml), so the rule "same major.minor" is written once.
It must stay importable without torch and without the compiled library.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_running_torch", "check_torch", "torch_release", "torch_requirement"]

_REBUILD = ("pip install --force-reinstall --no-deps --no-build-isolation "
            "--no-binary fused-optim fused-optim=={version}")


def torch_release(version: str) -> str:
    """The ABI-relevant part of a torch version: ``"2.13.0+cpu"`` -> ``"2.13"``."""
    return ".".join(version.split("+", 1)[0].split(".")[:2])


def torch_requirement(version: str) -> str:
    """The requirement a wheel built against torch ``version`` declares: ``"torch==2.13.*"``."""
    return f"torch=={torch_release(version)}.*"


def check_torch(built: str, running: str, fused_optim_version: str) -> None:
    """Raise ``ImportError`` unless ``running`` is the torch release ``built`` was compiled for."""
    if torch_release(built) == torch_release(running):
        return
    raise ImportError(
        f"fused-optim {fused_optim_version} was compiled against torch {built}, but torch "
        f"{running} is running. Its compiled ops load only into the torch release they were built "
        f"for (C++ ABI). Install that release (pip install '{torch_requirement(built)}'), or "
        f"rebuild fused-optim against the running torch: "
        f"{_REBUILD.format(version=fused_optim_version)}  (from a source checkout: "
        f"pip install --force-reinstall --no-deps --no-build-isolation packages/fused-optim)")


def check_running_torch() -> None:
    """The import-time check: the running torch against the version this build recorded."""
    import torch

    from fused_optim._built_against import TORCH_VERSION  # written by CMakeLists.txt
    from fused_optim.version import __version__

    check_torch(TORCH_VERSION, torch.__version__, __version__)


# scikit-build-core dynamic-metadata hooks (build time; the torch imported is the one compiled
# against: the build environment's, or the installed one with --no-build-isolation).
def dynamic_metadata(settings: dict[str, Any], project: dict[str, Any]) -> dict[str, list[str]]:
    if settings:
        raise RuntimeError(f"fused-optim's torch pin takes no settings, got {sorted(settings)}")
    import torch

    return {"dependencies": [torch_requirement(torch.__version__)]}


def dynamic_wheel(settings: dict[str, Any]) -> dict[str, bool]:
    # The sdist does not know which torch its wheels will be built against.
    return {"dependencies": True}
