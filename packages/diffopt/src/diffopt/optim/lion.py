"""PyTorch-style Lion: ``diffopt.Lion(params, ...)``, built on :func:`diffopt.lion`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import lion
from diffopt.optim.base import Optimizer

__all__ = ["Lion"]


class Lion(Optimizer):
    """The Lion optimizer with ``torch.optim``'s interface; see :func:`diffopt.lion`.

    Numerically it follows ``fused_optim.Lion`` step by step.

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: interpolation weight of the momentum in the direction, and decay of the momentum.
        weight_decay: decoupled weight decay factor.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the momentum and direction with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.Lion([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.9000, -1.9000])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-4,
        betas=(0.9, 0.99),
        weight_decay=0.0,
        *,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            params,
            lion(lr=lr, betas=betas, weight_decay=weight_decay, maximize=maximize,
                 use_accelerated_op=use_accelerated_op),
        )
