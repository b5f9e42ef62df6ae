"""Drop-in ``torch.optim.Adam`` running the fused ``adam_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, StepPlan

__all__ = ["Adam"]


class Adam(FusedStep, torch.optim.Adam):
    """``torch.optim.Adam`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor, state and ``state_dict()`` as ``torch.optim.Adam``; the arguments all
    drop-in classes share (``params``, ``lr``, ``maximize``, ``foreach``...) are described in
    :mod:`fused_optim.optim`.

    Args:
        params, lr, maximize, foreach, fused, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        betas: The decay rates of the first and second moment averages.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.
        amsgrad: Whether to use the AMSGrad variant (the running maximum of the second moment).
        decoupled_weight_decay: Whether the weight decay is decoupled, as in AdamW.

    >>> w = torch.nn.Parameter(torch.ones(3))
    >>> opt = Adam([w], lr=0.1)
    >>> w.grad = torch.ones(3)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000, 0.9000, 0.9000])
    """

    _name = "Adam"
    _op = "adam_step_"
    _real_lists = 5
    _floats = ("lr", "betas", "weight_decay", "eps")
    _flags = ("amsgrad", "maximize", "decoupled_weight_decay")
    _sparse_hint = ", please consider SparseAdam instead"

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        amsgrad = group["amsgrad"]
        state = self._zero_state(p, plan, "exp_avg", "exp_avg_sq", *(["max_exp_avg_sq"] if amsgrad else []))
        maxes = state["max_exp_avg_sq"] if amsgrad else None
        return False, [p, grad, state["exp_avg"], state["exp_avg_sq"], maxes, state["step"]]
