"""Drop-in ``torch.optim.RAdam`` running the fused ``radam_step_`` kernel."""

from __future__ import annotations

import torch

from fused_optim.optim._common import FusedStep

__all__ = ["RAdam"]


class RAdam(FusedStep, torch.optim.RAdam):
    """``torch.optim.RAdam`` with a fused multi-tensor step (CPU threads / CUDA kernel), including
    ``decoupled_weight_decay``.

    Same constructor, state and ``state_dict()`` as ``torch.optim.RAdam``.

    Args:
        params, lr, maximize, foreach, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        betas: The decay rates of the first and second moment averages.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.
        decoupled_weight_decay: Whether the weight decay is decoupled, as in AdamW.

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = RAdam([w], lr=0.1)
    >>> w.grad = torch.full((1,), 3.0)
    >>> opt.step()
    >>> w.detach()
    tensor([0.7000])
    """

    _state = ("step", "exp_avg", "exp_avg_sq")
    _floats = ("lr", "betas", "eps", "weight_decay")
    _flags = ("decoupled_weight_decay", "maximize", "capturable")
