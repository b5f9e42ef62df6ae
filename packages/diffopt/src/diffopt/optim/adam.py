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

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> opt = diffopt.Adam([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> bool(w < 1.0)
        True
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
