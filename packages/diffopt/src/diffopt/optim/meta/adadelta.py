"""Differentiable AdaDelta: ``diffopt.MetaAdaDelta(module, ...)``, built on :func:`diffopt.adadelta`."""

from __future__ import annotations

from torch import nn

from diffopt.alias import adadelta
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaAdaDelta", "MetaAdadelta"]


class MetaAdaDelta(MetaOptimizer):
    """The differentiable AdaDelta meta-optimizer; see :func:`diffopt.adadelta`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(2, 1)
        >>> w0 = net.weight
        >>> opt = diffopt.MetaAdaDelta(net, lr=1.0)
        >>> opt.step(net(torch.ones(3, 2)).pow(2).mean())
        >>> net(torch.ones(3, 2)).pow(2).mean().backward()
        >>> w0.grad is not None
        True
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-3,
        rho=0.9,
        eps=1e-6,
        weight_decay=0.0,
        *,
        moment_requires_grad=True,
        maximize=False,
    ) -> None:
        super().__init__(
            module,
            adadelta(
                lr=lr,
                rho=rho,
                eps=eps,
                weight_decay=weight_decay,
                moment_requires_grad=moment_requires_grad,
                maximize=maximize,
            ),
        )


MetaAdadelta = MetaAdaDelta
