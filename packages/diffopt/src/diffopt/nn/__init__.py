"""Modules for meta-learning.

``MetaGradientModule`` is defined here; ``ImplicitMetaGradientModule`` and
``ZeroOrderGradientModule`` are exported when their modules are present.

Example:
    >>> import diffopt
    >>> issubclass(diffopt.nn.MetaGradientModule, __import__('torch').nn.Module)
    True
"""

import importlib as _importlib
import importlib.util as _importlib_util

from diffopt.nn.module import MetaGradientModule

__all__ = ["MetaGradientModule"]

for _module, _name in (("implicit", "ImplicitMetaGradientModule"),
                       ("zero_order", "ZeroOrderGradientModule")):
    if _importlib_util.find_spec(f"diffopt.nn.{_module}") is not None:
        globals()[_name] = getattr(_importlib.import_module(f"diffopt.nn.{_module}"), _name)
        __all__.append(_name)
del _module, _name
