"""Drop-in ``torch.optim.Adam`` running the fused ``adam_step_`` kernel."""

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

__all__ = ["Adam"]


def adam_step(optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None, name: str,
              super_step: Callable[[Callable[[], Any] | None], Any]) -> Any:
    """Adam and AdamW's step: gather every group first, then one kernel call per group (per
    device and dtype)."""
    if torch_path_needed(optimizer):
        return super_step(closure)
    loss = run_closure(closure)
    with StepPlan(optimizer, name) as plan:
        state_of = optimizer.state
        work = []
        for group in optimizer.param_groups:
            amsgrad = group["amsgrad"]
            params, grads, exp_avgs, exp_avg_sqs, maxes, steps = [], [], [], [], [], []
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if grad.is_sparse:
                    raise RuntimeError(f"{name} does not support sparse gradients, please consider SparseAdam instead")
                state = state_of[p]
                if len(state) == 0:
                    plan.note_new_state(p)
                    state["step"] = new_step()
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    if amsgrad:
                        state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                params.append(p)
                grads.append(grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                if amsgrad:
                    maxes.append(state["max_exp_avg_sq"])
                steps.append(state["step"])
            work.append((group, [params, grads, exp_avgs, exp_avg_sqs, maxes, steps]))
        for group, lists in work:
            beta1, beta2 = group["betas"]
            kwargs = {"lr": scalar(group["lr"]), "beta1": scalar(beta1), "beta2": scalar(beta2),
                      "weight_decay": scalar(group["weight_decay"]), "eps": scalar(group["eps"]),
                      "amsgrad": bool(group["amsgrad"]), "maximize": bool(group["maximize"]),
                      "decoupled_weight_decay": bool(group.get("decoupled_weight_decay", False))}
            plan.add(ops.adam_step_, lists, 5, kwargs)
        plan.run()
    return loss


class Adam(torch.optim.Adam):
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

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Performs one optimization step (``closure`` re-evaluates the model and returns the loss)."""
        return adam_step(self, closure, "Adam", super().step)
