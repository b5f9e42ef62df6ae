"""Meta-gradient strategies beyond plain unrolling: implicit and zero-order differentiation.

``diffopt.diff.implicit`` and ``diffopt.diff.zero_order`` are exported when present, so this
package imports cleanly while either is missing, and so are their module classes
``ImplicitMetaGradientModule`` and ``ZeroOrderGradientModule`` (as in ``torchopt.diff``).

Example:
    >>> import diffopt
    >>> diffopt.diff.__name__
    'diffopt.diff'
    >>> diffopt.diff.ImplicitMetaGradientModule is diffopt.nn.ImplicitMetaGradientModule
    True
"""

import importlib as _importlib
import importlib.util as _importlib_util

__all__: list[str] = []

for _name in ("implicit", "zero_order"):
    if _importlib_util.find_spec(f"diffopt.diff.{_name}") is not None:
        globals()[_name] = _importlib.import_module(f"diffopt.diff.{_name}")
        __all__.append(_name)
del _name

_MODULE_CLASSES = {
    "ImplicitMetaGradientModule": "diffopt.nn.implicit",
    "ZeroOrderGradientModule": "diffopt.nn.zero_order",
}
__all__ += [name for name, module in _MODULE_CLASSES.items()
            if _importlib_util.find_spec(module) is not None]


def __getattr__(name: str):
    # The module classes live in diffopt.nn, which imports this package: resolve them lazily.
    if name in _MODULE_CLASSES:
        return getattr(_importlib.import_module(_MODULE_CLASSES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
