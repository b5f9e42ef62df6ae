"""PyTorch-style ASGD: ``diffopt.ASGD(params, ...)``, built on :func:`diffopt.asgd`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias.asgd import asgd
from diffopt.optim.base import Optimizer

__all__ = ["ASGD"]


class ASGD(Optimizer):
    """The ASGD optimizer with ``torch.optim``'s interface; see :func:`diffopt.asgd`.

    Numerically it follows ``torch.optim.ASGD`` step by step; the averaged parameters are in the
    optimizer state (``ax``).

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: the initial step size.
        lambd: the decay term.
        alpha: the power of the step-size decay.
        t0: the step at which averaging starts.
        weight_decay: L2 penalty added to the gradient.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: run fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.ASGD([w], lr=0.1, lambd=0.0)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.8000, -1.6000])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-2,
        lambd=1e-4,
        alpha=0.75,
        t0=1e6,
        weight_decay=0.0,
        *,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            params, asgd(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, maximize=maximize,
                         use_accelerated_op=use_accelerated_op)
        )
