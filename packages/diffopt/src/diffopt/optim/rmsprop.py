"""PyTorch-style RMSprop: ``diffopt.RMSProp(params, ...)``, built on :func:`diffopt.rmsprop`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import rmsprop
from diffopt.optim.base import Optimizer

__all__ = ["RMSProp", "RMSprop"]


class RMSProp(Optimizer):
    """The RMSprop optimizer with ``torch.optim``'s interface; see :func:`diffopt.rmsprop`.

    Numerically it follows ``torch.optim.RMSprop`` step by step.

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        alpha: smoothing constant of the running mean of squared gradients.
        eps: added to the denominator outside the square root.
        weight_decay: L2 penalty added to the gradient.
        momentum: momentum factor (0 disables momentum).
        centered: normalize by the estimated variance of the gradient instead of its mean square.
        initial_scale: starting value of the running mean of squared gradients.
        nesterov: use Nesterov momentum.
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.RMSProp([w], lr=0.01)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> torch.round(w.detach(), decimals=4)
        tensor([ 0.9000, -1.9000])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-2,
        alpha=0.99,
        eps=1e-8,
        weight_decay=0.0,
        momentum=0.0,
        centered=False,
        *,
        initial_scale=0.0,
        nesterov=False,
        maximize=False,
    ) -> None:
        super().__init__(
            params,
            rmsprop(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                initial_scale=initial_scale,
                nesterov=nesterov,
                maximize=maximize,
            ),
        )


RMSprop = RMSProp
