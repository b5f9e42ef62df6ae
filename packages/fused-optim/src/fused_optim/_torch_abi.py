"""Which torch fused-optim's compiled parts load into: the wheel's requirement and the import checks.

fused-optim ships two compiled modules (csrc/torch_api.h):

* ``fused_optim._C`` registers the ops through torch's stable C ABI, targeting torch 2.10: one
  build loads into torch 2.10 and every later release, CPU or CUDA. So the wheel requires
  ``torch>=2.10`` and ``import fused_optim`` refuses an older torch with an ``ImportError`` naming
  both versions (instead of an undefined-symbol message).
* ``fused_optim._eager``, the optional unboxed fast path, links torch's version-specific C++ and
  Python API: it is imported only into the torch release (major.minor) it was compiled against.
  Under any other torch the ops run through ``torch.ops`` (same results, more host time per call),
  and ``BUILD_INFO['eager']`` says which path runs.

The wheel's requirement (pyproject.toml's ``dependencies``) says ``torch>=MIN_TORCH``; a test
keeps the two equal. This module must stay importable without torch and the compiled library.
"""

from __future__ import annotations

__all__ = [
    "MIN_TORCH",
    "check_running_torch",
    "check_torch",
    "eager_matches",
    "torch_release",
    "torch_requirement",
]

# The oldest torch whose stable ABI has what _C uses (TORCH_TARGET_VERSION in CMakeLists.txt).
MIN_TORCH = "2.10"


def torch_release(version: str) -> str:
    """The ABI-relevant part of a torch version: ``"2.13.0+cpu"`` -> ``"2.13"``."""
    return ".".join(version.split("+", 1)[0].split(".")[:2])


def _as_tuple(release: str) -> tuple[int, ...]:
    return tuple(int("".join(c for c in part if c.isdigit()) or 0) for part in release.split("."))


def torch_requirement() -> str:
    """The requirement every fused-optim wheel declares: ``"torch>=2.10"``."""
    return f"torch>={MIN_TORCH}"


def check_torch(running: str, fused_optim_version: str) -> None:
    """Raise ``ImportError`` if torch ``running`` is older than the stable ABI _C targets."""
    if _as_tuple(torch_release(running)) >= _as_tuple(MIN_TORCH):
        return
    raise ImportError(
        f"fused-optim {fused_optim_version} needs torch {MIN_TORCH} or later (its ops use torch's "
        f"stable C ABI, which took its present form in torch {MIN_TORCH}), but torch {running} is "
        f"running: pip install 'torch>={MIN_TORCH}'")


def eager_matches(built: str, running: str) -> bool:
    """Whether the fast path compiled against torch ``built`` may load into torch ``running``."""
    return torch_release(built) == torch_release(running)


def check_running_torch() -> None:
    """The import-time check of the running torch."""
    import torch

    from fused_optim.version import __version__

    check_torch(torch.__version__, __version__)
