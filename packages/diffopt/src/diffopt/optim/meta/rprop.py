"""Differentiable Rprop: ``diffopt.MetaRprop(module, ...)``, built on :func:`diffopt.rprop`."""

from __future__ import annotations

from torch import nn

from diffopt.alias.rprop import rprop
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaRprop"]


class MetaRprop(MetaOptimizer):
    """The differentiable Rprop meta-optimizer; see :func:`diffopt.rprop`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones.
    Rprop's step depends on the gradient only through its sign, so the meta-gradient reaches the
    initial parameters directly and a (tensor) ``lr`` through the step sizes, not through the
    inner gradients.

    Args:
        module: the module whose parameters are replaced, out of place, at every ``step``.
        lr: the initial per-element step size (a number or a tensor).
        etas: ``(etaminus, etaplus)``: the step sizes' shrink and growth factors.
        step_sizes: ``(min, max)``: the bounds of the step sizes.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the step with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(1, 1, bias=False)
        >>> w0 = net.weight
        >>> with torch.no_grad():
        ...     _ = w0.fill_(1.0)
        >>> diffopt.MetaRprop(net, lr=0.25).step(net.weight.pow(2).sum())
        >>> net.weight.sum().backward()
        >>> round(net.weight.item(), 4), round(w0.grad.item(), 4)
        (0.75, 1.0)
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-2,
        etas=(0.5, 1.2),
        step_sizes=(1e-6, 50.0),
        *,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            module,
            rprop(lr=lr, etas=etas, step_sizes=step_sizes, maximize=maximize, use_accelerated_op=use_accelerated_op),
        )
