"""PyTorch-style RAdam: ``diffopt.RAdam(params, ...)``, built on :func:`diffopt.radam`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import radam
from diffopt.optim.base import Optimizer

__all__ = ["RAdam"]


class RAdam(Optimizer):
    """The RAdam optimizer with ``torch.optim``'s interface; see :func:`diffopt.radam`.

    Numerically it follows ``torch.optim.RAdam`` step by step.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> opt = diffopt.RAdam([w], lr=0.1)
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
        eps=1e-6,
        weight_decay=0.0,
        *,
        maximize=False,
    ) -> None:
        super().__init__(
            params, radam(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
        )
