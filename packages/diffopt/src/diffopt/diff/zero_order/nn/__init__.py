"""TorchOpt's ``torchopt.diff.zero_order.nn`` path to :class:`diffopt.nn.ZeroOrderGradientModule`.

Example:
    >>> from diffopt.diff.zero_order.nn import ZeroOrderGradientModule
    >>> import diffopt
    >>> ZeroOrderGradientModule is diffopt.nn.ZeroOrderGradientModule
    True
"""

from diffopt.diff.zero_order.nn.module import ZeroOrderGradientModule

__all__ = ["ZeroOrderGradientModule"]
