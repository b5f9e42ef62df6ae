"""Modules for meta-learning.

``MetaGradientModule`` is defined here; ``ImplicitMetaGradientModule`` and
``ZeroOrderGradientModule`` are exported when their modules are present. :mod:`diffopt.nn.stateless`
swaps tensors into a module by name (:func:`reparametrize`, :func:`swap_state`).

Example:
    >>> import diffopt
    >>> issubclass(diffopt.nn.MetaGradientModule, __import__('torch').nn.Module)
    True
"""

import importlib as _importlib
import importlib.util as _importlib_util

from diffopt.nn import stateless
from diffopt.nn.module import MetaGradientModule
from diffopt.nn.stateless import reparameterize, reparametrize, swap_state

__all__ = ["MetaGradientModule", "reparameterize", "reparametrize", "stateless", "swap_state"]

for _module, _name in (("implicit", "ImplicitMetaGradientModule"),
                       ("zero_order", "ZeroOrderGradientModule")):
    if _importlib_util.find_spec(f"diffopt.nn.{_module}") is not None:
        globals()[_name] = getattr(_importlib.import_module(f"diffopt.nn.{_module}"), _name)
        __all__.append(_name)
del _module, _name
