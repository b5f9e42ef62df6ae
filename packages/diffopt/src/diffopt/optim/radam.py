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

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first and second moment estimates.
        eps: added to the denominator outside the square root.
        weight_decay: L2 penalty added to the gradient.
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.RAdam([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.8000, -1.6000])
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
