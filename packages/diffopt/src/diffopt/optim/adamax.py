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

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> opt = diffopt.AdaMax([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> bool(w < 1.0)
        True
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
