"""Differentiable NAdam: ``diffopt.MetaNAdam(module, ...)``, built on :func:`diffopt.nadam`."""

from __future__ import annotations

from torch import nn

from diffopt.alias.nadam import nadam
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaNAdam"]


class MetaNAdam(MetaOptimizer):
    """The differentiable NAdam meta-optimizer; see :func:`diffopt.nadam`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step.

    Args:
        module: the module whose parameters are replaced, out of place, at every ``step``.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first and second moment estimates.
        eps: added to the denominator outside the square root.
        weight_decay: weight decay coefficient (L2, or decoupled).
        momentum_decay: decay of the momentum schedule.
        decoupled_weight_decay: decay the weights directly (NAdamW) instead of an L2 penalty.
        moment_requires_grad: create the optimizer state with ``requires_grad=True`` so the
            meta-gradient also flows through it.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the step with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(1, 1, bias=False)
        >>> w0 = net.weight
        >>> with torch.no_grad():
        ...     _ = w0.fill_(1.0)
        >>> diffopt.MetaNAdam(net, lr=0.25).step(net.weight.pow(2).sum())
        >>> net.weight.sum().backward()  # meta-gradient d w1 / d w0 through the step
        >>> round(net.weight.item(), 4), round(w0.grad.item(), 4)
        (0.7359, 1.0)
    """

    def __init__(
        self,
        module: nn.Module,
        lr=2e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        momentum_decay=4e-3,
        *,
        decoupled_weight_decay=False,
        moment_requires_grad=True,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            module,
            nadam(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                  decoupled_weight_decay=decoupled_weight_decay, moment_requires_grad=moment_requires_grad,
                  maximize=maximize, use_accelerated_op=use_accelerated_op),
        )
