"""Differentiable RMSprop: ``diffopt.MetaRMSProp(module, ...)``, built on :func:`diffopt.rmsprop`."""

from __future__ import annotations

from torch import nn

from diffopt.alias import rmsprop
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaRMSProp", "MetaRMSprop"]


class MetaRMSProp(MetaOptimizer):
    """The differentiable RMSprop meta-optimizer; see :func:`diffopt.rmsprop`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(2, 1)
        >>> w0 = net.weight
        >>> opt = diffopt.MetaRMSProp(net, lr=0.1)
        >>> opt.step(net(torch.ones(3, 2)).pow(2).mean())
        >>> net(torch.ones(3, 2)).pow(2).mean().backward()
        >>> w0.grad is not None
        True
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-2,
        alpha=0.99,
        eps=1e-8,
        weight_decay=0.0,
        momentum=0.0,
        centered=False,
        *,
        initial_scale=0.0,
        nesterov=False,
        maximize=False,
    ) -> None:
        super().__init__(
            module,
            rmsprop(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                initial_scale=initial_scale,
                nesterov=nesterov,
                maximize=maximize,
            ),
        )


MetaRMSprop = MetaRMSProp
