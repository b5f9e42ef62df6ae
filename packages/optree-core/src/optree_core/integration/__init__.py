"""The former name of :mod:`optree_core.integrations` (optree before 0.13 spelled it
``integration``); ``optree_core.integration.numpy`` and ``.torch`` still import."""

from __future__ import annotations

from types import ModuleType

from optree_core.integrations import SUBMODULES

__all__: list[str] = []


def __getattr__(name: str) -> ModuleType:
    if name in SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
