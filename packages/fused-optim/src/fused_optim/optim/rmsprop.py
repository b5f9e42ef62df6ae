"""Drop-in ``torch.optim.RMSprop`` running the fused ``rmsprop_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, StepPlan

__all__ = ["RMSprop"]


class RMSprop(FusedStep, torch.optim.RMSprop):
    """``torch.optim.RMSprop`` with a fused multi-tensor step (torch has no fused RMSprop).

    Same constructor, state and ``state_dict()`` as ``torch.optim.RMSprop``; the arguments all
    drop-in classes share (``params``, ``lr``, ``maximize``, ``foreach``...) are described in
    :mod:`fused_optim.optim`.

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

    _name = "RMSprop"
    _op = "rmsprop_step_"
    _real_lists = 5
    _floats = ("lr", "alpha", "eps", "weight_decay", "momentum")
    _flags = ("centered", "maximize")

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        centered, has_momentum = group["centered"], group["momentum"] > 0
        state = self._zero_state(p, plan, "square_avg", *(["momentum_buffer"] if has_momentum else []),
                                 *(["grad_avg"] if centered else []))
        return False, [p, grad, state["square_avg"], state["grad_avg"] if centered else None,
                       state["momentum_buffer"] if has_momentum else None, state["step"]]
