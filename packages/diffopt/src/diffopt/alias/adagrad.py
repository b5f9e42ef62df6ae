r"""AdaGrad (Duchi et al., 2011, JMLR 12), as ``torch.optim.Adagrad``.

.. math::
    s_t = s_{t-1} + g_t^2, \quad
    \theta_t = \theta_{t-1} - \frac{\eta}{1 + (t-1)\,\delta} \frac{g_t}{\sqrt{s_t} + \epsilon}

where :math:`\delta` is ``lr_decay``.
"""

from __future__ import annotations

import torch

from diffopt.alias._utils import check_lr, flip_sign_and_add_weight_decay
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform import scale_by_rss, scale_by_schedule

__all__ = ["adagrad"]


def adagrad(
    lr=1e-2,
    lr_decay: float = 0.0,
    weight_decay: float = 0.0,
    initial_accumulator_value: float = 0.0,
    eps: float = 1e-10,
    *,
    maximize: bool = False,
) -> GradientTransformation:
    """The functional AdaGrad optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        lr_decay: learning-rate decay, ``lr / (1 + (t-1) lr_decay)`` at step ``t``.
        weight_decay: L2 penalty added to the gradient.
        initial_accumulator_value: starting value of the sums of squares.
        eps: added to the root.
        maximize: maximize the objective instead of minimizing it.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = adagrad(lr=0.5, eps=0.0)
        >>> p = [torch.tensor([1.0])]
        >>> tx.update([torch.tensor([3.0])], tx.init(p), params=p)[0]
        [tensor([-0.5000])]
    """
    check_lr("adagrad", lr)
    if lr_decay < 0.0:
        raise ValueError(f"adagrad: invalid lr_decay {lr_decay}; it must be >= 0")

    def step_size(count):
        rate = lr(count) if callable(lr) else lr
        if lr_decay == 0.0:
            return -rate
        # float64 tensor math on the count tensor (it may be batched by vmap); scale casts it.
        return -rate / (1.0 + count.to(torch.float64) * lr_decay)

    return chain(
        flip_sign_and_add_weight_decay(weight_decay, maximize),
        scale_by_rss(initial_accumulator_value=initial_accumulator_value, eps=eps),
        scale_by_schedule(step_size),
    )
