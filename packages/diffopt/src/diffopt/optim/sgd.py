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

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        momentum: momentum factor (0 disables momentum).
        dampening: fraction of each new gradient left out of the momentum buffer.
        weight_decay: L2 penalty added to the gradient.
        nesterov: use Nesterov momentum.
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.SGD([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.8000, -1.6000])
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
