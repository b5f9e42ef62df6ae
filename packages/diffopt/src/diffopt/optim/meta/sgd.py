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

    Args:
        module: the module whose parameters are replaced, out of place, at every ``step``.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        momentum: momentum factor (0 disables momentum).
        dampening: fraction of each new gradient left out of the momentum buffer.
        weight_decay: L2 penalty added to the gradient.
        nesterov: use Nesterov momentum.
        moment_requires_grad: create the optimizer state with ``requires_grad=True`` so the
            meta-gradient also flows through it.
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(1, 1, bias=False)
        >>> w0 = net.weight
        >>> with torch.no_grad():
        ...     _ = w0.fill_(1.0)
        >>> diffopt.MetaSGD(net, lr=0.25).step(net.weight.pow(2).sum())
        >>> net.weight.sum().backward()  # meta-gradient d w1 / d w0 through the step
        >>> round(net.weight.item(), 4), round(w0.grad.item(), 4)
        (0.5, 0.5)
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
