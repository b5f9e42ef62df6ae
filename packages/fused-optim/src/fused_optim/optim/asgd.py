"""Drop-in ``torch.optim.ASGD`` running the fused ``asgd_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import _get_scalar_dtype

from fused_optim.optim._common import FusedStep, StepPlan, scalar

__all__ = ["ASGD"]


class ASGD(FusedStep, torch.optim.ASGD):
    """``torch.optim.ASGD`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor, state (``step``, ``eta``, ``mu``, ``ax``) and ``state_dict()`` as
    ``torch.optim.ASGD``; the arguments all drop-in classes share (``params``, ``lr``,
    ``maximize``, ``foreach``...) are described in :mod:`fused_optim.optim`. The averaged
    parameters are in each parameter's ``ax`` state.

    Args:
        params, lr, maximize, foreach, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        lambd: The decay term: the step size is ``lr / (1 + lambd lr t)^alpha``.
        alpha: The power of the step-size decay.
        t0: The step at which averaging starts.
        weight_decay: The L2 penalty coefficient.

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = ASGD([w], lr=0.1, lambd=0.0)
    >>> w.grad = torch.ones(1)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000])
    """

    _name = "ASGD"
    _op = "asgd_step_"
    _real_lists = 3
    _floats = ("lr", "lambd", "alpha", "t0", "weight_decay")
    _flags = ("maximize",)

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        state = self.state[p]
        if len(state) == 0:  # torch's key order and dtypes: the scalars live on the param's device
            plan.note_new_state(p)
            dtype = _get_scalar_dtype()
            state["step"] = torch.zeros((), device=p.device, dtype=dtype)
            state["eta"] = torch.as_tensor(scalar(group["lr"]), device=p.device, dtype=dtype).clone()
            state["mu"] = torch.ones((), device=p.device, dtype=dtype)
            state["ax"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return False, [p, grad, state["ax"], state["eta"], state["mu"], state["step"]]
