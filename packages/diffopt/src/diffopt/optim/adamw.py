"""PyTorch-style AdamW: ``diffopt.AdamW(params, ...)``, built on :func:`diffopt.adamw`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import adamw
from diffopt.optim.base import Optimizer

__all__ = ["AdamW"]


class AdamW(Optimizer):
    """The AdamW optimizer with ``torch.optim``'s interface; see :func:`diffopt.adamw`.

    Numerically it follows ``torch.optim.AdamW`` step by step.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> opt = diffopt.AdamW([w], lr=0.1)
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
        weight_decay=1e-2,
        *,
        eps_root=0.0,
        mask=None,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            params,
            adamw(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                eps_root=eps_root,
                mask=mask,
                maximize=maximize,
                use_accelerated_op=use_accelerated_op,
            ),
        )
