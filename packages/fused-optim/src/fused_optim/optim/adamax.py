"""Drop-in ``torch.optim.Adamax`` running the fused ``adamax_step_`` kernel."""

from __future__ import annotations

import torch

from fused_optim.optim._common import FusedStep

__all__ = ["Adamax"]


class Adamax(FusedStep, torch.optim.Adamax):
    """``torch.optim.Adamax`` with a fused multi-tensor step (CPU threads / CUDA kernel).

    Same constructor, state and ``state_dict()`` as ``torch.optim.Adamax``.

    Args:
        params, lr, maximize, foreach, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        betas: The decay rates of the first moment and of the infinity norm.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = Adamax([w], lr=0.1, eps=0.0)
    >>> w.grad = torch.full((1,), 4.0)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000])
    """

    _state = ("step", "exp_avg", "exp_inf")
    _floats = ("lr", "betas", "eps", "weight_decay")
    _flags = ("maximize", "capturable")
