"""Helpers for third-party libraries (attrs, jax, numpy, torch); each submodule imports its library
on first use of the submodule, so optree_core itself needs none of them."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

SUBMODULES: frozenset[str] = frozenset({"attrs", "jax", "numpy", "torch"})

__all__: list[str] = []  # the submodules load on attribute access: `integrations.numpy`


def __dir__() -> list[str]:
    return [*sorted(SUBMODULES), "SUBMODULES"]


def __getattr__(name: str) -> ModuleType:
    if name in SUBMODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        setattr(sys.modules[__name__], name, module)
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
