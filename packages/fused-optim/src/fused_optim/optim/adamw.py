"""Drop-in ``torch.optim.AdamW`` running the fused ``adam_step_`` kernel (decoupled decay)."""

from __future__ import annotations

import torch

from fused_optim.optim.adam import Adam

__all__ = ["AdamW"]


class AdamW(Adam, torch.optim.AdamW):
    """``torch.optim.AdamW`` with a fused multi-tensor step; see :class:`fused_optim.Adam`.

    As torch's AdamW is a torch Adam, this class is a :class:`fused_optim.Adam` (whose step it
    shares) and a ``torch.optim.AdamW`` (whose constructor sets ``decoupled_weight_decay``).

    Args:
        params, lr, maximize, foreach, fused, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        betas: The decay rates of the first and second moment averages.
        eps: Added to the denominator for numerical stability.
        weight_decay: The decoupled weight decay coefficient (``p *= 1 - lr * weight_decay``).
        amsgrad: Whether to use the AMSGrad variant (the running maximum of the second moment).

    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = AdamW([w], lr=0.1, weight_decay=0.5)
    >>> w.grad = torch.zeros(2)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9500, 0.9500])
    """

