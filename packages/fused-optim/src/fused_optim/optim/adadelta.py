"""Drop-in ``torch.optim.Adadelta`` running the fused ``adadelta_step_`` kernel."""

from __future__ import annotations

import torch

from fused_optim.optim._common import FusedStep

__all__ = ["Adadelta"]


class Adadelta(FusedStep, torch.optim.Adadelta):
    """``torch.optim.Adadelta`` with a fused multi-tensor step (CPU threads / CUDA kernel).

    Same constructor, state and ``state_dict()`` as ``torch.optim.Adadelta``.

    Args:
        params, maximize, foreach, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        lr: The coefficient that scales the delta before it is applied.
        rho: The decay rate of the running averages of squared gradients and updates.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = Adadelta([w], rho=0.0, eps=1.0)
    >>> w.grad = torch.ones(1)
    >>> opt.step()
    >>> w.detach()
    tensor([0.2929])
    """

    _state = ("step", "square_avg", "acc_delta")
    _floats = ("lr", "rho", "eps", "weight_decay")
    _flags = ("maximize", "capturable")
