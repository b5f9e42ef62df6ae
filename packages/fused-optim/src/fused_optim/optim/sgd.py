"""Drop-in ``torch.optim.SGD`` running the fused ``sgd_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, Slot, option

__all__ = ["SGD"]


def _uninitialized(p: Tensor, grad: Tensor, group: dict[str, Any]) -> Tensor:
    """A fresh momentum buffer: the first step's call writes it (``first_step``)."""
    return torch.empty_like(grad, memory_format=torch.preserve_format)


class SGD(FusedStep, torch.optim.SGD):
    """``torch.optim.SGD`` with a fused multi-tensor step (CPU threads / CUDA kernel).

    Same constructor, state (``momentum_buffer``) and ``state_dict()`` as ``torch.optim.SGD``.
    Sparse gradients run torch's own implementation.

    Args:
        params, lr, maximize, foreach, fused, differentiable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        momentum: The momentum factor (0 for plain SGD).
        dampening: The dampening applied to the momentum's gradient term.
        weight_decay: The L2 penalty coefficient.
        nesterov: Whether to use Nesterov momentum.

    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = SGD([w], lr=0.5, momentum=0.9)
    >>> w.grad = torch.ones(2)
    >>> opt.step()
    >>> w.detach()
    tensor([0.5000, 0.5000])
    """

    _state = (Slot("momentum_buffer", _uninitialized, when=option("momentum")),)
    _floats = ("lr", "momentum", "dampening", "weight_decay")
    _flags = ("nesterov", "maximize")
    _variant_flag = "first_step"
    _sparse_to_torch = True  # torch's SGD has a sparse update
    _fresh_state_written_by_step = True  # (torch's fused SGD keeps them uninitialized when found_inf skips)

    def _variant(self, kind: Any, created: bool) -> bool:
        return created  # a fresh momentum buffer starts as the (decayed) gradient
