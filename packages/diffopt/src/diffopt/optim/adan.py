"""PyTorch-style Adan: ``diffopt.Adan(params, ...)``, built on :func:`diffopt.adan`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import adan
from diffopt.optim.base import Optimizer

__all__ = ["Adan"]


class Adan(Optimizer):
    """The Adan optimizer with ``torch.optim``'s interface; see :func:`diffopt.adan`.

    Numerically it follows ``fused_optim.Adan`` step by step.

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the three moments.
        eps: added to the denominator outside the root.
        weight_decay: weight decay factor (the paper's proximal step).
        no_prox: decay decoupled (as AdamW) instead of proximally.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the moments and direction with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.Adan([w], lr=0.1, eps=0.0)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.9000, -1.9000])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-3,
        betas=(0.98, 0.92, 0.99),
        eps=1e-8,
        weight_decay=0.0,
        *,
        no_prox=False,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            params,
            adan(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, no_prox=no_prox,
                 maximize=maximize, use_accelerated_op=use_accelerated_op),
        )
