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

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> opt = diffopt.RMSProp([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> bool(w < 1.0)
        True
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
