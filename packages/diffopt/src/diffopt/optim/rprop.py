"""PyTorch-style Rprop: ``diffopt.Rprop(params, ...)``, built on :func:`diffopt.rprop`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias.rprop import rprop
from diffopt.optim.base import Optimizer

__all__ = ["Rprop"]


class Rprop(Optimizer):
    """The Rprop optimizer with ``torch.optim``'s interface; see :func:`diffopt.rprop`.

    Numerically it follows ``torch.optim.Rprop`` step by step.

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: the initial per-element step size.
        etas: ``(etaminus, etaplus)``: the step sizes' shrink and growth factors.
        step_sizes: ``(min, max)``: the bounds of the step sizes.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: run fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.Rprop([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.9000, -1.9000])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-2,
        etas=(0.5, 1.2),
        step_sizes=(1e-6, 50.0),
        *,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            params, rprop(lr=lr, etas=etas, step_sizes=step_sizes, maximize=maximize,
                          use_accelerated_op=use_accelerated_op)
        )
