"""Drop-in ``torch.optim.Rprop`` running the fused ``rprop_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, StepPlan, new_step, scalar

__all__ = ["Rprop"]


class Rprop(FusedStep, torch.optim.Rprop):
    """``torch.optim.Rprop`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor, state (``step``, ``prev``, ``step_size``) and ``state_dict()`` as
    ``torch.optim.Rprop``; the arguments all drop-in classes share (``params``, ``lr``,
    ``maximize``, ``foreach``...) are described in :mod:`fused_optim.optim`. As in torch, ``lr``
    is only the initial step size of each element; later changes to it (a scheduler) affect only
    parameters that have no state yet.

    Args:
        params, lr, maximize, foreach, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        etas: The multiplicative decrease and increase factors ``(etaminus, etaplus)`` of the step
            sizes, ``0 < etaminus < 1 < etaplus``.
        step_sizes: The minimal and maximal step sizes.

    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = Rprop([w], lr=0.1)
    >>> w.grad = torch.tensor([2.0, -3.0])
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000, 1.1000])
    """

    _name = "Rprop"
    _op = "rprop_step_"
    _real_lists = 4
    _flags = ("maximize",)

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        state = self.state[p]
        if len(state) == 0:
            plan.note_new_state(p)
            state["step"] = new_step()
            state["prev"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            lr = scalar(group["lr"])
            # A complex step size is two independent real ones, as torch initializes it.
            state["step_size"] = torch.full_like(grad, complex(lr, lr) if p.is_complex() else lr)
        return False, [p, grad, state["prev"], state["step_size"], state["step"]]

    def _kwargs(self, group: dict[str, Any], variant: bool) -> dict[str, Any]:
        kwargs = super()._kwargs(group, variant)
        kwargs["lr"] = scalar(group["lr"])  # checked (it seeds the step sizes of new state)
        kwargs["etaminus"], kwargs["etaplus"] = (scalar(e) for e in group["etas"])
        kwargs["step_size_min"], kwargs["step_size_max"] = (scalar(s) for s in group["step_sizes"])
        return kwargs
