"""Drop-in ``torch.optim.RMSprop`` running the fused ``rmsprop_step_`` kernel."""

from __future__ import annotations

import torch

from fused_optim.optim._common import FusedStep, Slot, option

__all__ = ["RMSprop"]


class RMSprop(FusedStep, torch.optim.RMSprop):
    """``torch.optim.RMSprop`` with a fused multi-tensor step (torch has no fused RMSprop).

    Same constructor, state and ``state_dict()`` as ``torch.optim.RMSprop``.

    Args:
        params, lr, maximize, foreach, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        alpha: The smoothing constant of the squared-gradient average.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.
        momentum: The momentum factor (0: none).
        centered: Whether to normalize by the estimated variance of the gradient.

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = RMSprop([w], lr=0.01, alpha=0.75, eps=0.0)
    >>> w.grad = torch.ones(1)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9800])
    """

    _state = ("step", "square_avg", Slot("momentum_buffer", when=option("momentum")),
              Slot("grad_avg", when=option("centered")))
    _columns = ("square_avg", "grad_avg", "momentum_buffer", "step")
    _floats = ("lr", "alpha", "eps", "weight_decay", "momentum")
    _flags = ("centered", "maximize", "capturable")
