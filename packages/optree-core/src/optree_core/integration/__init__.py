"""Helpers for array libraries; each submodule imports its library lazily (on first use of the
submodule), so optree_core itself never needs torch or numpy."""

__all__ = ["numpy", "torch"]


def __getattr__(name: str):
    if name in __all__:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
