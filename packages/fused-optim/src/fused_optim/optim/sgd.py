"""Drop-in ``torch.optim.SGD`` running the fused ``sgd_step_`` kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fused_optim import ops
from fused_optim.optim._common import StepPlan, run_closure, scalar, torch_path_needed

__all__ = ["SGD"]


class SGD(torch.optim.SGD):
    """``torch.optim.SGD`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor, defaults, argument checks, param groups, state (``momentum_buffer``) and
    ``state_dict()`` layout as ``torch.optim.SGD``. Sparse gradients, ``differentiable=True`` and
    a learning rate that requires grad run torch's own implementation.

    Args:
        params: The parameters to optimize: an iterable of tensors or of parameter-group dicts.
        lr: The learning rate (a float, or a tensor as torch allows).
        momentum: The momentum factor (0 for plain SGD).
        dampening: The dampening applied to the momentum's gradient term.
        weight_decay: The L2 penalty coefficient.
        nesterov: Whether to use Nesterov momentum.
        maximize: Whether to maximize the objective instead of minimizing it.
        foreach, fused: Accepted for torch compatibility and ignored: the step is always the fused
            kernel.
        differentiable: A torch.optim feature a fused kernel cannot offer; groups that set it run
            torch's own implementation.

    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = SGD([w], lr=0.5, momentum=0.9)
    >>> w.grad = torch.ones(2)
    >>> opt.step()
    >>> w.detach()
    tensor([0.5000, 0.5000])
    """

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Performs one optimization step (``closure`` re-evaluates the model and returns the loss)."""
        if torch_path_needed(self) or any(
            p.grad is not None and p.grad.is_sparse for g in self.param_groups for p in g["params"]
        ):
            return super().step(closure)
        loss = run_closure(closure)
        with StepPlan(self, "SGD") as plan:
            work = []
            for group in self.param_groups:
                has_momentum = group["momentum"] != 0
                # Buffers that exist already, and fresh ones that torch starts as the (decayed) gradient.
                existing: list[list[torch.Tensor]] = [[], [], []]
                fresh: list[list[torch.Tensor]] = [[], [], []]
                for p in group["params"]:
                    grad = p.grad
                    if grad is None:
                        continue
                    if not has_momentum:
                        existing[0].append(p)
                        existing[1].append(grad)
                        continue
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    lists = existing
                    if buf is None:
                        plan.note_new_state(p, "momentum_buffer")
                        buf = state["momentum_buffer"] = torch.empty_like(grad, memory_format=torch.preserve_format)
                        lists = fresh
                    lists[0].append(p)
                    lists[1].append(grad)
                    lists[2].append(buf)
                work.append((group, existing, fresh))
            for group, existing, fresh in work:
                kwargs = {"lr": scalar(group["lr"]), "momentum": scalar(group["momentum"]),
                          "dampening": scalar(group["dampening"]), "weight_decay": scalar(group["weight_decay"]),
                          "nesterov": bool(group["nesterov"]), "maximize": bool(group["maximize"])}
                plan.add(ops.sgd_step_, existing, 3, dict(kwargs, first_step=False), has_steps=False)
                plan.add(ops.sgd_step_, fresh, 3, dict(kwargs, first_step=True), has_steps=False)
            plan.run()
        return loss
