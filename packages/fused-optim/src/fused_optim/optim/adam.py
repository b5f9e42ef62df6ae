"""Drop-in ``torch.optim.Adam`` running the fused ``adam_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, StepPlan

__all__ = ["Adam"]


class Adam(FusedStep, torch.optim.Adam):
    """``torch.optim.Adam`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor, defaults, argument checks, param groups, state keys and ``state_dict()``
    layout as ``torch.optim.Adam``: checkpoints move between the two in both directions.
    ``foreach``/``fused`` are accepted and ignored (the step is always fused); groups with
    ``differentiable=True``, or ``capturable=True`` and CUDA parameters, run torch's own
    implementation.

    Args:
        params: The parameters to optimize: an iterable of tensors or of parameter-group dicts.
        lr: The learning rate (a float, or a tensor as torch allows).
        betas: The decay rates of the first and second moment averages.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.
        amsgrad: Whether to use the AMSGrad variant (the running maximum of the second moment).
        maximize: Whether to maximize the objective instead of minimizing it.
        foreach, fused: Accepted for torch compatibility and ignored: the step is always the fused
            kernel.
        differentiable, capturable: torch.optim features a fused kernel cannot offer: groups with
            ``differentiable=True``, or ``capturable=True`` and CUDA parameters, run torch's own
            implementation (capturable changes nothing for CPU parameters).
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
