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

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(2, 1)
        >>> w0 = net.weight
        >>> opt = diffopt.MetaAdaGrad(net, lr=0.1)
        >>> opt.step(net(torch.ones(3, 2)).pow(2).mean())
        >>> net(torch.ones(3, 2)).pow(2).mean().backward()
        >>> w0.grad is not None
        True
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
