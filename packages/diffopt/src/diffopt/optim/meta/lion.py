"""Differentiable Lion: ``diffopt.MetaLion(module, ...)``, built on :func:`diffopt.lion`."""

from __future__ import annotations

from torch import nn

from diffopt.alias import lion
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaLion"]


class MetaLion(MetaOptimizer):
    """The differentiable Lion meta-optimizer; see :func:`diffopt.lion`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step. The step's direction is a sign,
    whose derivative is zero: the meta-gradient flows through the parameters' own path (scaled by
    the decay :math:`1 - \\eta\\lambda` per step) and, with ``moment_requires_grad``, through the
    momentum into later steps' momenta.

    Args:
        module: the module whose parameters are replaced, out of place, at every ``step``.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: interpolation weight of the momentum in the direction, and decay of the momentum.
        weight_decay: decoupled weight decay factor.
        moment_requires_grad: create the optimizer state with ``requires_grad=True`` so the
            meta-gradient also flows through it.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the momentum and direction with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(1, 1, bias=False)
        >>> w0 = net.weight
        >>> with torch.no_grad():
        ...     _ = w0.fill_(1.0)
        >>> diffopt.MetaLion(net, lr=0.25, weight_decay=0.4).step(net.weight.pow(2).sum())
        >>> net.weight.sum().backward()  # meta-gradient d w1 / d w0: the decay 1 - 0.25 * 0.4
        >>> round(net.weight.item(), 4), round(w0.grad.item(), 4)
        (0.65, 0.9)
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-4,
        betas=(0.9, 0.99),
        weight_decay=0.0,
        *,
        moment_requires_grad=True,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            module,
            lion(
                lr=lr,
                betas=betas,
                weight_decay=weight_decay,
                moment_requires_grad=moment_requires_grad,
                maximize=maximize,
                use_accelerated_op=use_accelerated_op,
            ),
        )
