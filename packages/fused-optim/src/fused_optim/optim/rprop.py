"""Drop-in ``torch.optim.Rprop`` running the fused ``rprop_step_`` kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, Slot, scalar

__all__ = ["Rprop"]


def _initial_step_size(p: Tensor, grad: Tensor, group: dict[str, Any]) -> Tensor:
    """Every element's first step size is ``lr``; a complex one is two independent real ones, as
    torch initializes it."""
    lr = scalar(group["lr"])
    return torch.full_like(grad, complex(lr, lr) if p.is_complex() else lr)


class Rprop(FusedStep, torch.optim.Rprop):
    """``torch.optim.Rprop`` with a fused multi-tensor step (CPU threads / CUDA kernel).

    Same constructor, state (``step``, ``prev``, ``step_size``) and ``state_dict()`` as
    ``torch.optim.Rprop``. As in torch, ``lr`` is only the initial step size of each element; later
    changes to it (a scheduler) affect only parameters that have no state yet.

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

    _state = ("step", "prev", Slot("step_size", _initial_step_size))
    # lr is checked too: it seeds the step sizes of new state
    _floats = ("lr", ("etas", "etaminus", "etaplus"), ("step_sizes", "step_size_min", "step_size_max"))
    _flags = ("maximize", "capturable")
