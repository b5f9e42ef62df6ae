"""Zero-order (evolution-strategies) gradients of objectives that autograd cannot differentiate.

``zero_order(distribution, method, argnums, num_samples, sigma)`` decorates a scalar objective so
that its gradient with respect to the chosen arguments is a Monte-Carlo estimate of the gradient of
its Gaussian smoothing. As in TorchOpt, the module itself is callable:
``diffopt.diff.zero_order(...)`` is ``diffopt.diff.zero_order.zero_order(...)``.
:class:`ZeroOrderGradientModule` is the object-oriented form (also at
:class:`diffopt.nn.ZeroOrderGradientModule`).

Example:
    >>> import torch
    >>> from diffopt.diff import zero_order
    >>> @zero_order(torch.distributions.Normal(0.0, 1.0), method='antithetic',
    ...             num_samples=2000, sigma=0.1)
    ... def staircase(x):  # piecewise constant: autograd would give zero gradients
    ...     return torch.round(10 * x).sum() / 10
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> x = torch.tensor([0.33, -0.71], requires_grad=True)
    >>> staircase(x).backward()
    >>> torch.allclose(x.grad, torch.ones(2), atol=0.1)  # the smoothed slope is 1
    True
"""

import sys
import types

from diffopt.diff.zero_order.decorator import Samplable, zero_order

__all__ = ["Samplable", "ZeroOrderGradientModule", "zero_order"]


def __getattr__(name: str):
    # The module class lives in diffopt.nn (which imports this package), and so does what the
    # ``nn`` subpackage re-exports: resolve both lazily.
    if name == "ZeroOrderGradientModule":
        from diffopt.nn.zero_order import ZeroOrderGradientModule

        return ZeroOrderGradientModule
    if name == "nn":
        import importlib

        return importlib.import_module(f"{__name__}.nn")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """Lets ``diffopt.diff.zero_order(...)`` be used as the decorator, as in TorchOpt."""

    def __call__(self, *args, **kwargs):
        return zero_order(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
