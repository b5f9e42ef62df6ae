"""Drop-in ``torch.optim.RMSprop`` running the fused ``rmsprop_step_`` kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fused_optim import ops
from fused_optim.optim._common import (
    StepPlan,
    new_step,
    run_closure,
    scalar,
    torch_path_needed,
)

__all__ = ["RMSprop"]


class RMSprop(torch.optim.RMSprop):
    """``torch.optim.RMSprop`` with a fused multi-tensor step (torch has no fused RMSprop).

    Same constructor, defaults, argument checks, param groups, state keys and ``state_dict()``
    layout as ``torch.optim.RMSprop``; see :class:`fused_optim.Adam` for the fallbacks.

    Args:
        params: The parameters to optimize: an iterable of tensors or of parameter-group dicts.
        lr: The learning rate (a float, or a tensor as torch allows).
        alpha: The smoothing constant of the squared-gradient average.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.
        momentum: The momentum factor (0: none).
        centered: Whether to normalize by the estimated variance of the gradient.
        maximize: Whether to maximize the objective instead of minimizing it.
        foreach: Accepted for torch compatibility and ignored: the step is always the fused kernel.
        differentiable, capturable: torch.optim features a fused kernel cannot offer: groups with
            ``differentiable=True``, or ``capturable=True`` and CUDA parameters, run torch's own
            implementation (capturable changes nothing for CPU parameters).

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = RMSprop([w], lr=0.01, alpha=0.75, eps=0.0)
    >>> w.grad = torch.ones(1)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9800])
    """

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Performs one optimization step (``closure`` re-evaluates the model and returns the loss)."""
        if torch_path_needed(self):
            return super().step(closure)
        loss = run_closure(closure)
        with StepPlan(self, "RMSprop") as plan:
            work = []
            for group in self.param_groups:
                centered, has_momentum = group["centered"], group["momentum"] > 0
                params, grads, square_avgs, grad_avgs, bufs, steps = [], [], [], [], [], []
                for p in group["params"]:
                    grad = p.grad
                    if grad is None:
                        continue
                    if grad.is_sparse:
                        raise RuntimeError("RMSprop does not support sparse gradients")
                    state = self.state[p]
                    if len(state) == 0:
                        plan.note_new_state(p)
                        state["step"] = new_step()
                        state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        if has_momentum:
                            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        if centered:
                            state["grad_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    params.append(p)
                    grads.append(grad)
                    square_avgs.append(state["square_avg"])
                    if centered:
                        grad_avgs.append(state["grad_avg"])
                    if has_momentum:
                        bufs.append(state["momentum_buffer"])
                    steps.append(state["step"])
                work.append((group, [params, grads, square_avgs, grad_avgs, bufs, steps]))
            for group, lists in work:
                kwargs = {"lr": scalar(group["lr"]), "alpha": scalar(group["alpha"]), "eps": scalar(group["eps"]),
                          "weight_decay": scalar(group["weight_decay"]), "momentum": scalar(group["momentum"]),
                          "centered": bool(group["centered"]), "maximize": bool(group["maximize"])}
                plan.add(ops.rmsprop_step_, lists, 5, kwargs)
            plan.run()
        return loss
