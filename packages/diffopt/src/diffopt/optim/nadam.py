"""PyTorch-style NAdam: ``diffopt.NAdam(params, ...)``, built on :func:`diffopt.nadam`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias.nadam import nadam
from diffopt.optim.base import Optimizer

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """The NAdam optimizer with ``torch.optim``'s interface; see :func:`diffopt.nadam`.

    Numerically it follows ``torch.optim.NAdam`` step by step.

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first and second moment estimates.
        eps: added to the denominator outside the square root.
        weight_decay: weight decay coefficient (L2, or decoupled).
        momentum_decay: decay of the momentum schedule.
        decoupled_weight_decay: decay the weights directly (NAdamW) instead of an L2 penalty.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: run fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.NAdam([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.8944, -1.8944])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=2e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        momentum_decay=4e-3,
        *,
        decoupled_weight_decay=False,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            params,
            nadam(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                  decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                  use_accelerated_op=use_accelerated_op),
        )
