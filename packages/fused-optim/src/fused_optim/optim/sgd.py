"""Drop-in ``torch.optim.SGD`` running the fused ``sgd_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, StepPlan

__all__ = ["SGD"]


class SGD(FusedStep, torch.optim.SGD):
    """``torch.optim.SGD`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor, state (``momentum_buffer``) and ``state_dict()`` as ``torch.optim.SGD``; the
    arguments all drop-in classes share (``params``, ``lr``, ``maximize``, ``foreach``...) are
    described in :mod:`fused_optim.optim`. Sparse gradients run torch's own implementation.

    Args:
        params, lr, maximize, foreach, fused, differentiable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        momentum: The momentum factor (0 for plain SGD).
        dampening: The dampening applied to the momentum's gradient term.
        weight_decay: The L2 penalty coefficient.
        nesterov: Whether to use Nesterov momentum.

    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = SGD([w], lr=0.5, momentum=0.9)
    >>> w.grad = torch.ones(2)
    >>> opt.step()
    >>> w.detach()
    tensor([0.5000, 0.5000])
    """

    _name = "SGD"
    _op = "sgd_step_"
    _real_lists = 3
    _floats = ("lr", "momentum", "dampening", "weight_decay")
    _flags = ("nesterov", "maximize")
    _variant_flag = "first_step"  # a fresh momentum buffer starts as the (decayed) gradient
    _sparse_to_torch = True  # torch's SGD has a sparse update

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        if group["momentum"] == 0:
            return False, [p, grad, None]
        state = self.state[p]
        buf = state.get("momentum_buffer")
        if buf is not None:
            return False, [p, grad, buf]
        plan.note_new_state(p, "momentum_buffer")
        buf = state["momentum_buffer"] = torch.empty_like(grad, memory_format=torch.preserve_format)
        return True, [p, grad, buf]
