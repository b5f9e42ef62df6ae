"""Drop-in ``torch.optim.Adagrad`` running the fused ``adagrad_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, Slot

__all__ = ["Adagrad"]


def _initial_sum(p: Tensor, grad: Tensor, group: dict[str, Any]) -> Tensor:
    """The state of parameters added after construction (torch creates the others' eagerly)."""
    return torch.full_like(p, group["initial_accumulator_value"], memory_format=torch.preserve_format)


class Adagrad(FusedStep, torch.optim.Adagrad):
    """``torch.optim.Adagrad`` with a fused multi-tensor step (CPU threads / CUDA kernel).

    Same constructor (state is created eagerly, as torch does), state and ``state_dict()`` as
    ``torch.optim.Adagrad``. Sparse gradients, which torch's Adagrad supports, run torch's
    implementation.

    Args:
        params, lr, maximize, foreach, fused, differentiable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        lr_decay: The learning rate decay: the step size is ``lr / (1 + (step - 1) * lr_decay)``.
        weight_decay: The L2 penalty coefficient.
        initial_accumulator_value: The starting value of the sums of squared gradients.
        eps: Added to the denominator for numerical stability.

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = Adagrad([w], lr=0.1, eps=0.0)
    >>> w.grad = torch.full((1,), 2.0)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000])
    """

    _state = ("step", Slot("sum", _initial_sum))
    _floats = ("lr", "lr_decay", "weight_decay", "eps")
    _flags = ("maximize",)
    _sparse_to_torch = True  # torch's Adagrad has a sparse update
