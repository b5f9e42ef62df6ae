"""Differentiable AdaGrad: ``diffopt.MetaAdaGrad(module, ...)``, built on :func:`diffopt.adagrad`."""

from __future__ import annotations

from torch import nn

from diffopt.alias import adagrad
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaAdaGrad", "MetaAdagrad"]


class MetaAdaGrad(MetaOptimizer):
    """The differentiable AdaGrad meta-optimizer; see :func:`diffopt.adagrad`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step.

    Args:
        module: the module whose parameters are replaced, out of place, at every ``step``.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        lr_decay: learning-rate decay: step ``t`` uses ``lr / (1 + (t - 1) * lr_decay)``.
        weight_decay: L2 penalty added to the gradient.
        initial_accumulator_value: starting value of the sums of squared gradients.
        eps: added to the denominator outside the square root.
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(1, 1, bias=False)
        >>> w0 = net.weight
        >>> with torch.no_grad():
        ...     _ = w0.fill_(1.0)
        >>> diffopt.MetaAdaGrad(net, lr=0.25).step(net.weight.pow(2).sum())
        >>> net.weight.sum().backward()  # meta-gradient d w1 / d w0 through the step
        >>> round(net.weight.item(), 4), round(w0.grad.item(), 4)
        (0.75, 1.0)
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-2,
        lr_decay=0.0,
        weight_decay=0.0,
        initial_accumulator_value=0.0,
        eps=1e-10,
        *,
        maximize=False,
    ) -> None:
        super().__init__(
            module,
            adagrad(
                lr=lr,
                lr_decay=lr_decay,
                weight_decay=weight_decay,
                initial_accumulator_value=initial_accumulator_value,
                eps=eps,
                maximize=maximize,
            ),
        )


MetaAdagrad = MetaAdaGrad
