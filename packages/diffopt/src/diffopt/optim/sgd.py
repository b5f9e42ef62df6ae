"""PyTorch-style stochastic gradient descent: ``diffopt.SGD(params, ...)``, built on :func:`diffopt.sgd`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import sgd
from diffopt.optim.base import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """The stochastic gradient descent optimizer with ``torch.optim``'s interface; see :func:`diffopt.sgd`.

    Numerically it follows ``torch.optim.SGD`` step by step.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> opt = diffopt.SGD([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> bool(w < 1.0)
        True
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        momentum=0.0,
        dampening=0.0,
        weight_decay=0.0,
        nesterov=False,
        *,
        maximize=False,
    ) -> None:
        super().__init__(
            params,
            sgd(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
                maximize=maximize,
            ),
        )
