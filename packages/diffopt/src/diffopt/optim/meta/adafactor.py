"""Differentiable Adafactor: ``diffopt.MetaAdafactor(module, ...)``, built on :func:`diffopt.adafactor`."""

from __future__ import annotations

from torch import nn

from diffopt.alias.adafactor import adafactor
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaAdafactor"]


class MetaAdafactor(MetaOptimizer):
    """The differentiable Adafactor meta-optimizer; see :func:`diffopt.adafactor`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step (including the parameter-RMS and
    update-RMS scale factors, which torch.optim reads as Python numbers).

    Args:
        module: the module whose parameters are replaced, out of place, at every ``step``.
        lr: the learning rate (a number or a tensor).
        beta2_decay: the exponent of the second-moment decay.
        eps: ``(eps1, eps2)``: the floors of the second moment and of the parameters' RMS.
        d: the clipping threshold of the update's RMS.
        weight_decay: the decoupled weight decay.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the step with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(2, 1, bias=False)
        >>> with torch.no_grad():
        ...     _ = net.weight.fill_(1.0)
        >>> diffopt.MetaAdafactor(net, lr=0.25).step(net.weight.pow(2).sum())
        >>> net.weight.detach()
        tensor([[0.7500, 0.7500]])
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-2,
        beta2_decay=-0.8,
        eps=(None, 1e-3),
        d=1.0,
        weight_decay=0.0,
        *,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            module,
            adafactor(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay, maximize=maximize,
                      use_accelerated_op=use_accelerated_op),
        )
