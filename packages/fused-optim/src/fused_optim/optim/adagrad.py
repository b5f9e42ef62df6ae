"""Drop-in ``torch.optim.Adagrad`` running the fused ``adagrad_step_`` kernel."""

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

__all__ = ["Adagrad"]


class Adagrad(torch.optim.Adagrad):
    """``torch.optim.Adagrad`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor (state is created eagerly, as torch does), defaults, argument checks, param
    groups, state keys and ``state_dict()`` layout as ``torch.optim.Adagrad``. Sparse gradients,
    which torch's Adagrad supports, run torch's implementation.

    Args:
        params: The parameters to optimize: an iterable of tensors or of parameter-group dicts.
        lr: The learning rate (a float, or a tensor as torch allows).
        lr_decay: The learning rate decay: the step size is ``lr / (1 + (step - 1) * lr_decay)``.
        weight_decay: The L2 penalty coefficient.
        initial_accumulator_value: The starting value of the sums of squared gradients.
        eps: Added to the denominator for numerical stability.
        maximize: Whether to maximize the objective instead of minimizing it.
        foreach, fused: Accepted for torch compatibility and ignored: the step is always the fused
            kernel.
        differentiable: A torch.optim feature a fused kernel cannot offer; groups that set it run
            torch's own implementation.

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = Adagrad([w], lr=0.1, eps=0.0)
    >>> w.grad = torch.full((1,), 2.0)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000])
    """

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Performs one optimization step (``closure`` re-evaluates the model and returns the loss)."""
        if torch_path_needed(self) or any(
            p.grad is not None and p.grad.is_sparse for g in self.param_groups for p in g["params"]
        ):
            return super().step(closure)
        loss = run_closure(closure)
        with StepPlan(self, "Adagrad") as plan:
            work = []
            for group in self.param_groups:
                params, grads, sums, steps = [], [], [], []
                for p in group["params"]:
                    grad = p.grad
                    if grad is None:
                        continue
                    state = self.state[p]
                    if "sum" not in state:  # params added after construction
                        plan.note_new_state(p, "step", "sum")
                        state["step"] = new_step()
                        init = group["initial_accumulator_value"]
                        state["sum"] = torch.full_like(p, init, memory_format=torch.preserve_format)
                    params.append(p)
                    grads.append(grad)
                    sums.append(state["sum"])
                    steps.append(state["step"])
                work.append((group, [params, grads, sums, steps]))
            for group, lists in work:
                kwargs = {"lr": scalar(group["lr"]), "lr_decay": scalar(group["lr_decay"]),
                          "weight_decay": scalar(group["weight_decay"]), "eps": scalar(group["eps"]),
                          "maximize": bool(group["maximize"])}
                plan.add(ops.adagrad_step_, lists, 3, kwargs)
            plan.run()
        return loss
