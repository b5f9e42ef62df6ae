"""Drop-in ``torch.optim.NAdam`` running the fused ``nadam_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import _get_scalar_dtype

from fused_optim.optim._common import FusedStep, StepPlan

__all__ = ["NAdam"]


class NAdam(FusedStep, torch.optim.NAdam):
    """``torch.optim.NAdam`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel), including
    ``momentum_decay`` and ``decoupled_weight_decay``.

    Same constructor, state (``step``, ``mu_product``, ``exp_avg``, ``exp_avg_sq``) and
    ``state_dict()`` as ``torch.optim.NAdam``; the arguments all drop-in classes share
    (``params``, ``lr``, ``maximize``, ``foreach``...) are described in :mod:`fused_optim.optim`.

    Args:
        params, lr, maximize, foreach, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        betas: The decay rates of the first and second moment averages.
        eps: Added to the denominator for numerical stability.
        weight_decay: The weight decay coefficient (an L2 penalty, or decoupled as in AdamW).
        momentum_decay: The momentum schedule's decay: ``mu_t = beta1 (1 - 0.5 * 0.96^(t psi))``.
        decoupled_weight_decay: Whether the weight decay is decoupled (NAdamW).

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = NAdam([w], lr=0.1)
    >>> w.grad = torch.ones(1)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000])
    """

    _name = "NAdam"
    _op = "nadam_step_"
    _real_lists = 4
    _floats = ("lr", "betas", "eps", "weight_decay", "momentum_decay")
    _flags = ("decoupled_weight_decay", "maximize")

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        state = self.state[p]
        if len(state) == 0:  # torch's key order: step, mu_product, then the moments
            plan.note_new_state(p)
            state["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype())
            state["mu_product"] = torch.tensor(1.0, dtype=_get_scalar_dtype())
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return False, [p, grad, state["exp_avg"], state["exp_avg_sq"], state["mu_product"], state["step"]]
