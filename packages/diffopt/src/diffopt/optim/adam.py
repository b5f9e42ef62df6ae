"""PyTorch-style Adam: ``diffopt.Adam(params, ...)``, built on :func:`diffopt.adam`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import adam
from diffopt.optim.base import Optimizer

__all__ = ["Adam"]


class Adam(Optimizer):
    """The Adam optimizer with ``torch.optim``'s interface; see :func:`diffopt.adam`.

    Numerically it follows ``torch.optim.Adam`` step by step.

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first and second moment estimates.
        eps: added to the denominator outside the square root.
        weight_decay: L2 penalty added to the gradient.
        eps_root: added to the second moment inside the square root (keeps meta-gradients bounded).
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the Adam moments and direction with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.Adam([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.9000, -1.9000])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        *,
        eps_root=0.0,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            params,
            adam(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                eps_root=eps_root,
                maximize=maximize,
                use_accelerated_op=use_accelerated_op,
            ),
        )
