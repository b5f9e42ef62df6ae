"""Differentiable ASGD: ``diffopt.MetaASGD(module, ...)``, built on :func:`diffopt.asgd`."""

from __future__ import annotations

from torch import nn

from diffopt.alias.asgd import asgd
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaASGD"]


class MetaASGD(MetaOptimizer):
    """The differentiable ASGD meta-optimizer; see :func:`diffopt.asgd`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step.

    Args:
        module: the module whose parameters are replaced, out of place, at every ``step``.
        lr: the initial step size (a number or a tensor).
        lambd: the decay term.
        alpha: the power of the step-size decay.
        t0: the step at which averaging starts.
        weight_decay: L2 penalty added to the gradient.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the step with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(1, 1, bias=False)
        >>> w0 = net.weight
        >>> with torch.no_grad():
        ...     _ = w0.fill_(1.0)
        >>> diffopt.MetaASGD(net, lr=0.25, lambd=0.0).step(net.weight.pow(2).sum())
        >>> net.weight.sum().backward()  # w1 = w0 - 0.25 * 2 w0
        >>> round(net.weight.item(), 4), round(w0.grad.item(), 4)
        (0.5, 0.5)
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-2,
        lambd=1e-4,
        alpha=0.75,
        t0=1e6,
        weight_decay=0.0,
        *,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            module,
            asgd(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, maximize=maximize,
                 use_accelerated_op=use_accelerated_op),
        )
