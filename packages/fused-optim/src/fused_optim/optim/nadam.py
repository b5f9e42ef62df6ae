"""Drop-in ``torch.optim.NAdam`` running the fused ``nadam_step_`` kernel."""

from __future__ import annotations

import torch

from fused_optim.optim._common import FusedStep, scalar_state

__all__ = ["NAdam"]


class NAdam(FusedStep, torch.optim.NAdam):
    """``torch.optim.NAdam`` with a fused multi-tensor step (CPU threads / CUDA kernel), including
    ``momentum_decay`` and ``decoupled_weight_decay``.

    Same constructor, state (``step``, ``mu_product``, ``exp_avg``, ``exp_avg_sq``) and
    ``state_dict()`` as ``torch.optim.NAdam``.

    Args:
        params, lr, maximize, foreach, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        betas: The decay rates of the first and second moment averages.
        eps: Added to the denominator for numerical stability.
        weight_decay: The weight decay coefficient (an L2 penalty, or decoupled as in AdamW).
        momentum_decay: The momentum schedule's decay: ``mu_t = beta1 (1 - 0.5 * 0.96^(t psi))``.
        decoupled_weight_decay: Whether the weight decay is decoupled (NAdamW).

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = NAdam([w], lr=0.1)
    >>> w.grad = torch.ones(1)
    >>> opt.step()
    >>> w.detach()
    tensor([0.8944])
    """

    _state = ("step", scalar_state("mu_product", 1.0), "exp_avg", "exp_avg_sq")  # torch's key order
    _columns = ("exp_avg", "exp_avg_sq", "mu_product", "step")
    _floats = ("lr", "betas", "eps", "weight_decay", "momentum_decay")
    _flags = ("decoupled_weight_decay", "maximize", "capturable")
