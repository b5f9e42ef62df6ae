"""Drop-in ``torch.optim.Adadelta`` running the fused ``adadelta_step_`` kernel."""

from __future__ import annotations

import torch

from fused_optim.optim._common import FusedStep

__all__ = ["Adadelta"]


class Adadelta(FusedStep, torch.optim.Adadelta):
    """``torch.optim.Adadelta`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor, defaults, argument checks, param groups, state keys and ``state_dict()``
    layout as ``torch.optim.Adadelta``; see :class:`fused_optim.Adam` for the fallbacks.

    Args:
        params: The parameters to optimize: an iterable of tensors or of parameter-group dicts.
        lr: The coefficient that scales the delta before it is applied.
        rho: The decay rate of the running averages of squared gradients and updates.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.
        maximize: Whether to maximize the objective instead of minimizing it.
        foreach: Accepted for torch compatibility and ignored: the step is always the fused kernel.
        differentiable, capturable: torch.optim features a fused kernel cannot offer: groups with
            ``differentiable=True``, or ``capturable=True`` and CUDA parameters, run torch's own
            implementation (capturable changes nothing for CPU parameters).

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = Adadelta([w], rho=0.0, eps=1.0)
    >>> w.grad = torch.ones(1)
    >>> opt.step()
    >>> w.detach()
    tensor([0.2929])
    """

    _name = "Adadelta"
    _op = "adadelta_step_"
    _real_lists = 4
    _buffers = ("square_avg", "acc_delta")
    _floats = ("lr", "rho", "eps", "weight_decay")
    _flags = ("maximize",)
