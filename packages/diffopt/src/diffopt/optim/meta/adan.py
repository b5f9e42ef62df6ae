"""Differentiable Adan: ``diffopt.MetaAdan(module, ...)``, built on :func:`diffopt.adan`."""

from __future__ import annotations

from torch import nn

from diffopt.alias import adan
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaAdan"]


class MetaAdan(MetaOptimizer):
    """The differentiable Adan meta-optimizer; see :func:`diffopt.adan`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step (TorchOpt's users asked for this
    one).

    Args:
        module: the module whose parameters are replaced, out of place, at every ``step``.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the three moments.
        eps: added to the denominator outside the root.
        weight_decay: weight decay factor (the paper's proximal step).
        no_prox: decay decoupled (as AdamW) instead of proximally.
        moment_requires_grad: create the optimizer state with ``requires_grad=True`` so the
            meta-gradient also flows through it.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the moments and direction with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(1, 1, bias=False)
        >>> w0 = net.weight
        >>> with torch.no_grad():
        ...     _ = w0.fill_(1.0)
        >>> diffopt.MetaAdan(net, lr=0.25).step(net.weight.pow(2).sum())
        >>> net.weight.sum().backward()  # meta-gradient d w1 / d w0 through the step
        >>> round(net.weight.item(), 4), round(w0.grad.item(), 4)
        (0.75, 1.0)
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-3,
        betas=(0.98, 0.92, 0.99),
        eps=1e-8,
        weight_decay=0.0,
        *,
        no_prox=False,
        moment_requires_grad=True,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            module,
            adan(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                no_prox=no_prox,
                moment_requires_grad=moment_requires_grad,
                maximize=maximize,
                use_accelerated_op=use_accelerated_op,
            ),
        )
