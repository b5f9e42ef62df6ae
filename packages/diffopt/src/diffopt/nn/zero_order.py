"""``ZeroOrderGradientModule``: a module whose ``forward()`` gets evolution-strategies gradients.

Subclass it with the class keywords ``method``, ``num_samples`` and ``sigma`` (as in TorchOpt),
define ``forward(*input)`` returning a scalar and ``sample(sample_shape)`` returning noise: the
gradient of ``forward``'s output with respect to ``self.parameters()`` is then the ES estimate of
:func:`diffopt.diff.zero_order.zero_order`, so ``forward`` may be non-differentiable.
"""

from __future__ import annotations

import abc
import functools
from typing import Any, ClassVar

import torch

from diffopt.diff.zero_order.decorator import _check_configuration, zero_order
from diffopt.nn._reparametrize import reparametrize
from diffopt.nn.module import MetaGradientModule

__all__ = ["ZeroOrderGradientModule", "enable_zero_order_gradients"]


def _enable_zero_order_gradients(cls: type[ZeroOrderGradientModule]) -> None:
    user_forward = cls.forward

    @functools.wraps(user_forward)
    def forward(self: ZeroOrderGradientModule, *input: Any, **kwargs: Any) -> torch.Tensor:
        named = tuple(self.named_parameters())
        if not named:
            raise RuntimeError(f"{type(self).__name__} has no parameters to estimate gradients for")
        names, params = zip(*named)

        def stateless_forward(flat_params, *input, **kwargs):
            with reparametrize(self, zip(names, flat_params)):
                return user_forward(self, *input, **kwargs)

        estimator = zero_order(self.sample, argnums=0, **type(self)._zero_order_options)
        return estimator(stateless_forward)(params, *input, **kwargs)

    forward.__zero_order_gradients_enabled__ = True  # type: ignore[attr-defined]
    cls.forward = forward  # type: ignore[method-assign]


def enable_zero_order_gradients(
    cls: type[ZeroOrderGradientModule],
) -> type[ZeroOrderGradientModule]:
    """Make ``cls.forward`` return an output whose gradient is the ES estimate; return ``cls``.

    Subclasses that define ``forward`` get this automatically; enabling twice is a ``TypeError``
    (the estimate would be taken of an estimate).

    Args:
        cls: a subclass of :class:`ZeroOrderGradientModule`.

    Returns:
        ``cls`` itself, with ``forward`` wrapped.

    Example:
        >>> import torch
        >>> class Net(ZeroOrderGradientModule):
        ...     def forward(self):
        ...         return torch.tensor(0.0)
        ...     def sample(self, sample_shape):
        ...         return torch.randn(sample_shape)
        >>> try:
        ...     enable_zero_order_gradients(Net)
        ... except TypeError:
        ...     print('TypeError')
        TypeError
    """
    if getattr(cls.forward, "__zero_order_gradients_enabled__", False):
        raise TypeError(f"{cls.__name__}.forward() already has zero-order gradients enabled")
    _enable_zero_order_gradients(cls)
    return cls


class ZeroOrderGradientModule(MetaGradientModule, metaclass=abc.ABCMeta):
    """Base class for modules whose parameters get zero-order (ES) gradients.

    Class keywords: ``method`` (``'naive'``, ``'forward'`` or ``'antithetic'``; default
    ``'naive'``), ``num_samples`` (default 100) and ``sigma`` (default 1.0); a subclass that
    leaves one out inherits its parent's.

    Args:
        *args: the subclass's constructor arguments; tensors that require grad and modules among
            them become meta-parameters and meta-modules (see :class:`MetaGradientModule`).
        **kwargs: the same, for keyword arguments.
        method: class keyword, the estimator: ``'naive'``, ``'forward'`` or ``'antithetic'``.
        num_samples: class keyword, the number of noise draws per gradient.
        sigma: class keyword, the smoothing radius (a positive number).

    Example:
        >>> import torch
        >>> from diffopt.nn import ZeroOrderGradientModule
        >>> class Quantized(ZeroOrderGradientModule, method='antithetic', num_samples=500,
        ...                 sigma=0.2):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = torch.nn.Parameter(torch.tensor([0.5, -0.5]))
        ...     def forward(self, x):  # rounding: autograd would return zeros
        ...         return torch.round(10 * (x @ self.w) ** 2) / 10
        ...     def sample(self, sample_shape):
        ...         return torch.randn(sample_shape)
        >>> _ = torch.manual_seed(0)
        >>> net = Quantized()
        >>> net(torch.tensor([1.0, 2.0])).backward()  # smoothed d(x.w)^2/dw = 2 (x.w) x
        >>> torch.allclose(net.w.grad, torch.tensor([-1.0, -2.0]), atol=0.3)
        True
    """

    _zero_order_options: ClassVar[dict[str, Any]] = {
        "method": "naive",
        "num_samples": 100,
        "sigma": 1.0,
    }

    def __init_subclass__(
        cls,
        method: str | None = None,
        num_samples: int | None = None,
        sigma: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        options = dict(cls._zero_order_options)
        given = {"method": method, "num_samples": num_samples, "sigma": sigma}
        options.update({k: v for k, v in given.items() if v is not None})
        options["sigma"] = _check_configuration(
            options["method"], options["num_samples"], options["sigma"]
        )
        cls._zero_order_options = options
        if "forward" in cls.__dict__ and not getattr(
            cls.__dict__["forward"], "__zero_order_gradients_enabled__", False
        ):
            _enable_zero_order_gradients(cls)

    @abc.abstractmethod
    def forward(self, *input: Any, **kwargs: Any) -> torch.Tensor:
        """Return a scalar; its gradient with respect to the parameters is estimated by ES."""
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    @abc.abstractmethod
    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:  # noqa: B008
        """Return noise of shape ``sample_shape`` with zero mean and unit variance per element."""
        raise NotImplementedError(
            f"{type(self).__name__} must define sample(sample_shape) returning noise (e.g. "
            "torch.randn(sample_shape))"
        )
