"""PyTorch-style AdaMax: ``diffopt.AdaMax(params, ...)``, built on :func:`diffopt.adamax`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import adamax
from diffopt.optim.base import Optimizer

__all__ = ["AdaMax", "Adamax"]


class AdaMax(Optimizer):
    """The AdaMax optimizer with ``torch.optim``'s interface; see :func:`diffopt.adamax`.

    Numerically it follows ``torch.optim.Adamax`` step by step.

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first and second moment estimates.
        eps: added to the infinity norm in the denominator.
        weight_decay: L2 penalty added to the gradient.
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.AdaMax([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.9000, -1.9000])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        *,
        maximize=False,
    ) -> None:
        super().__init__(
            params,
            adamax(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize),
        )


Adamax = AdaMax
