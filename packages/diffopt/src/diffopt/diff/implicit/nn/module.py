"""TorchOpt's ``torchopt.diff.implicit.nn.module``: the implicit module and its class helpers.

They are defined in :mod:`diffopt.nn.implicit`; this path exists so that code written for
TorchOpt imports them unchanged.

Example:
    >>> from diffopt.diff.implicit.nn.module import enable_implicit_gradients
    >>> import diffopt.nn.implicit
    >>> enable_implicit_gradients is diffopt.nn.implicit.enable_implicit_gradients
    True
"""

from diffopt.nn.implicit import (
    ImplicitMetaGradientModule,
    enable_implicit_gradients,
    make_optimality_from_objective,
)

__all__ = ["ImplicitMetaGradientModule", "enable_implicit_gradients",
           "make_optimality_from_objective"]
