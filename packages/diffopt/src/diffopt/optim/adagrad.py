"""PyTorch-style AdaGrad: ``diffopt.AdaGrad(params, ...)``, built on :func:`diffopt.adagrad`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import adagrad
from diffopt.optim.base import Optimizer

__all__ = ["AdaGrad", "Adagrad"]


class AdaGrad(Optimizer):
    """The AdaGrad optimizer with ``torch.optim``'s interface; see :func:`diffopt.adagrad`.

    Numerically it follows ``torch.optim.Adagrad`` step by step.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> opt = diffopt.AdaGrad([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> bool(w < 1.0)
        True
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-2,
        lr_decay=0.0,
        weight_decay=0.0,
        initial_accumulator_value=0.0,
        eps=1e-10,
        *,
        maximize=False,
    ) -> None:
        super().__init__(
            params,
            adagrad(
                lr=lr,
                lr_decay=lr_decay,
                weight_decay=weight_decay,
                initial_accumulator_value=initial_accumulator_value,
                eps=eps,
                maximize=maximize,
            ),
        )


Adagrad = AdaGrad
