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

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        lr_decay: learning-rate decay: step ``t`` uses ``lr / (1 + (t - 1) * lr_decay)``.
        weight_decay: L2 penalty added to the gradient.
        initial_accumulator_value: starting value of the sums of squared gradients.
        eps: added to the denominator outside the square root.
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.AdaGrad([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.9000, -1.9000])
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
