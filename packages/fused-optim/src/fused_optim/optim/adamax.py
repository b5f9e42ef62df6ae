"""Drop-in ``torch.optim.Adamax`` running the fused ``adamax_step_`` kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fused_optim import ops
from fused_optim.optim._common import (
    StepPlan,
    gather_zero_state,
    run_closure,
    scalar,
    torch_path_needed,
)

__all__ = ["Adamax"]


class Adamax(torch.optim.Adamax):
    """``torch.optim.Adamax`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor, defaults, argument checks, param groups, state keys and ``state_dict()``
    layout as ``torch.optim.Adamax``; see :class:`fused_optim.Adam` for the fallbacks.

    Args:
        params: The parameters to optimize: an iterable of tensors or of parameter-group dicts.
        lr: The learning rate (a float, or a tensor as torch allows).
        betas: The decay rates of the first moment and of the infinity norm.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.
        maximize: Whether to maximize the objective instead of minimizing it.
        foreach: Accepted for torch compatibility and ignored: the step is always the fused kernel.
        differentiable, capturable: torch.optim features a fused kernel cannot offer: groups with
            ``differentiable=True``, or ``capturable=True`` and CUDA parameters, run torch's own
            implementation (capturable changes nothing for CPU parameters).

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = Adamax([w], lr=0.1, eps=0.0)
    >>> w.grad = torch.full((1,), 4.0)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000])
    """

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Performs one optimization step (``closure`` re-evaluates the model and returns the loss)."""
        if torch_path_needed(self):
            return super().step(closure)
        loss = run_closure(closure)
        with StepPlan(self, "Adamax") as plan:
            work = gather_zero_state(self, "Adamax", ("exp_avg", "exp_inf"), plan)
            for group, lists in work:
                beta1, beta2 = group["betas"]
                kwargs = {"lr": scalar(group["lr"]), "beta1": scalar(beta1), "beta2": scalar(beta2),
                          "eps": scalar(group["eps"]), "weight_decay": scalar(group["weight_decay"]),
                          "maximize": bool(group["maximize"])}
                plan.add(ops.adamax_step_, lists, 4, kwargs)
            plan.run()
        return loss
