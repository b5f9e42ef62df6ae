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

    Args:
        module: the module whose parameters are replaced, out of place, at every ``step``.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        alpha: smoothing constant of the running mean of squared gradients.
        eps: added to the denominator outside the square root.
        weight_decay: L2 penalty added to the gradient.
        momentum: momentum factor (0 disables momentum).
        centered: normalize by the estimated variance of the gradient instead of its mean square.
        initial_scale: starting value of the running mean of squared gradients.
        nesterov: use Nesterov momentum.
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(1, 1, bias=False)
        >>> w0 = net.weight
        >>> with torch.no_grad():
        ...     _ = w0.fill_(1.0)
        >>> diffopt.MetaRMSProp(net, lr=0.01).step(net.weight.pow(2).sum())
        >>> net.weight.sum().backward()  # meta-gradient d w1 / d w0 through the step
        >>> round(net.weight.item(), 4), round(w0.grad.item(), 4)
        (0.9, 1.0)
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
