"""TorchOpt's ``torchopt.diff.zero_order.nn.module``: the zero-order module and its class helper.

They are defined in :mod:`diffopt.nn.zero_order`; this path exists so that code written for
TorchOpt imports them unchanged.

Example:
    >>> from diffopt.diff.zero_order.nn.module import enable_zero_order_gradients
    >>> import diffopt.nn.zero_order
    >>> enable_zero_order_gradients is diffopt.nn.zero_order.enable_zero_order_gradients
    True
"""

from diffopt.nn.zero_order import ZeroOrderGradientModule, enable_zero_order_gradients

__all__ = ["ZeroOrderGradientModule", "enable_zero_order_gradients"]
