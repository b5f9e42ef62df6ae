"""Differentiable stochastic gradient descent: ``diffopt.MetaSGD(module, ...)``, built on :func:`diffopt.sgd`."""

from __future__ import annotations

from torch import nn

from diffopt.alias import sgd
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaSGD"]


class MetaSGD(MetaOptimizer):
    """The differentiable stochastic gradient descent meta-optimizer; see :func:`diffopt.sgd`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(2, 1)
        >>> w0 = net.weight
        >>> opt = diffopt.MetaSGD(net, lr=0.1)
        >>> opt.step(net(torch.ones(3, 2)).pow(2).mean())
        >>> net(torch.ones(3, 2)).pow(2).mean().backward()
        >>> w0.grad is not None
        True
    """

    def __init__(
        self,
        module: nn.Module,
        lr,
        momentum=0.0,
        dampening=0.0,
        weight_decay=0.0,
        nesterov=False,
        *,
        moment_requires_grad=True,
        maximize=False,
    ) -> None:
        super().__init__(
            module,
            sgd(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
                moment_requires_grad=moment_requires_grad,
                maximize=maximize,
            ),
        )
        # Plain SGD has no state, so the step can be one fused ``add(p, g, alpha=-lr)`` per
        # parameter (same numbers, half the autograd nodes); schedules and tensors keep the chain.
        if (momentum == 0 and weight_decay == 0 and not maximize
                and isinstance(lr, (int, float)) and not isinstance(lr, bool)):
            self._plain_sgd_lr = float(lr)
