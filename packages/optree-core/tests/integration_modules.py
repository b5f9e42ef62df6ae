"""Locate optree_core's integration helpers (``integrations`` as in optree >= 0.13, or the older
``integration`` spelling)."""

from __future__ import annotations

import importlib

import pytest


def integration_module(library: str):
    pytest.importorskip(library)
    for package in ("optree_core.integrations", "optree_core.integration"):
        try:
            return importlib.import_module(f"{package}.{library}")
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("optree_core"):
                raise
    pytest.fail(f"optree_core has no integration module for {library}")
