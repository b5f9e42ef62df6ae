"""Differentiable AdamW: ``diffopt.MetaAdamW(module, ...)``, built on :func:`diffopt.adamw`."""

from __future__ import annotations

from torch import nn

from diffopt.alias import adamw
from diffopt.optim.meta.base import MetaOptimizer

__all__ = ["MetaAdamW"]


class MetaAdamW(MetaOptimizer):
    """The differentiable AdamW meta-optimizer; see :func:`diffopt.adamw`.

    ``step(loss)`` replaces the module's parameters by new tensors that depend on the old ones,
    so an outer loss can be differentiated through every step.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(2, 1)
        >>> w0 = net.weight
        >>> opt = diffopt.MetaAdamW(net, lr=0.1)
        >>> opt.step(net(torch.ones(3, 2)).pow(2).mean())
        >>> net(torch.ones(3, 2)).pow(2).mean().backward()
        >>> w0.grad is not None
        True
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=1e-2,
        *,
        eps_root=0.0,
        mask=None,
        moment_requires_grad=True,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            module,
            adamw(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                eps_root=eps_root,
                mask=mask,
                moment_requires_grad=moment_requires_grad,
                maximize=maximize,
                use_accelerated_op=use_accelerated_op,
            ),
        )
