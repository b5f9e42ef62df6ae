"""Drop-in ``torch.optim.Adam`` running the fused ``adam_step_`` kernel."""

from __future__ import annotations

import torch

from fused_optim.optim._common import FusedStep, Slot, option

__all__ = ["Adam"]


class Adam(FusedStep, torch.optim.Adam):
    """``torch.optim.Adam`` with a fused multi-tensor step (CPU threads / CUDA kernel).

    Same constructor, state and ``state_dict()`` as ``torch.optim.Adam``.

    Args:
        params, lr, maximize, foreach, fused, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        betas: The decay rates of the first and second moment averages.
        eps: Added to the denominator for numerical stability.
        weight_decay: The L2 penalty coefficient.
        amsgrad: Whether to use the AMSGrad variant (the running maximum of the second moment).
        decoupled_weight_decay: Whether the weight decay is decoupled, as in AdamW.

    >>> w = torch.nn.Parameter(torch.ones(3))
    >>> opt = Adam([w], lr=0.1)
    >>> w.grad = torch.ones(3)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000, 0.9000, 0.9000])
    """

    _state = ("step", "exp_avg", "exp_avg_sq", Slot("max_exp_avg_sq", when=option("amsgrad")))
    _floats = ("lr", "betas", "weight_decay", "eps")
    _flags = ("amsgrad", "maximize", "decoupled_weight_decay", "capturable")
    _sparse_hint = ", please consider SparseAdam instead"
