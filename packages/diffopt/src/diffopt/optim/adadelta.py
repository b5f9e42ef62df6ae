"""PyTorch-style AdaDelta: ``diffopt.AdaDelta(params, ...)``, built on :func:`diffopt.adadelta`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import adadelta
from diffopt.optim.base import Optimizer

__all__ = ["AdaDelta", "Adadelta"]


class AdaDelta(Optimizer):
    """The AdaDelta optimizer with ``torch.optim``'s interface; see :func:`diffopt.adadelta`.

    Numerically it follows ``torch.optim.Adadelta`` step by step.

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        rho: decay of the running averages of squared gradients and squared updates.
        eps: added inside both square roots.
        weight_decay: L2 penalty added to the gradient.
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.AdaDelta([w], lr=1.0)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> torch.round(w.detach(), decimals=4)
        tensor([ 0.9968, -1.9968])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-3,
        rho=0.9,
        eps=1e-6,
        weight_decay=0.0,
        *,
        maximize=False,
    ) -> None:
        super().__init__(
            params, adadelta(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        )


Adadelta = AdaDelta
