r"""Adan (Xie et al., 2022/2024, "Adan: Adaptive Nesterov Momentum Algorithm", arXiv:2208.06677).

With Adan's direction :math:`u_t` (:func:`diffopt.transform.scale_by_adan`, three moments of the
gradient, of its differences and of the squared Nesterov-corrected gradient):

.. math::
    \theta_t = \frac{\theta_{t-1} - \eta\, u_t}{1 + \eta\lambda}
    \quad(\text{no\_prox: } \theta_t = \theta_{t-1}(1 - \eta\lambda) - \eta\, u_t)

as ``fused_optim.Adan``. The proximal decay is written as the update
:math:`-\eta (u_t + \lambda\theta_{t-1}) / (1 + \eta\lambda)`, the same step.
"""

from __future__ import annotations

from diffopt.alias._utils import (
    check_lr,
    check_weight_decay,
    flip_sign_and_add_weight_decay,
    scale_by_neg_lr,
)
from diffopt.base import GradientTransformation, identity
from diffopt.combine import chain
from diffopt.transform import (
    add_decayed_weights,
    scale,
    scale_by_accelerated_adan,
    scale_by_adan,
    scale_by_schedule,
)

__all__ = ["adan"]


def _proximal_shrink(lr, weight_decay: float) -> GradientTransformation:
    """Multiply by ``1 / (1 + lr * weight_decay)`` (the proximal step of Adan's weight decay)."""
    if weight_decay == 0.0:
        return identity()
    if callable(lr):
        return scale_by_schedule(lambda count: 1 / (1 + lr(count) * weight_decay))
    return scale(1 / (1 + lr * weight_decay))


def adan(
    lr=1e-3,
    betas: tuple[float, float, float] = (0.98, 0.92, 0.99),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    *,
    no_prox: bool = False,
    moment_requires_grad: bool = False,
    maximize: bool = False,
    use_accelerated_op: bool = False,
) -> GradientTransformation:
    """The functional Adan optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the three moments (of the gradient, of its difference, of the squared
            corrected gradient).
        eps: added to the denominator outside the root.
        weight_decay: weight decay factor, applied as the paper's proximal step.
        no_prox: decay decoupled (as AdamW) instead of proximally.
        moment_requires_grad: create the moments with ``requires_grad=True``.
        maximize: maximize the objective instead of minimizing it.
        use_accelerated_op: compute the moments and direction with fused-optim's fused op.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = adan(lr=0.1, eps=0.0)
        >>> params = [torch.tensor([2.0])]
        >>> tx.update([torch.tensor([3.0])], tx.init(params), params=params)[0]
        [tensor([-0.1000])]
    """
    check_lr("adan", lr)
    check_weight_decay("adan", weight_decay)
    b1, b2, b3 = betas
    scaler = scale_by_accelerated_adan if use_accelerated_op else scale_by_adan
    return chain(
        flip_sign_and_add_weight_decay(0.0, maximize),
        scaler(b1=b1, b2=b2, b3=b3, eps=eps, moment_requires_grad=moment_requires_grad),
        add_decayed_weights(weight_decay),
        scale_by_neg_lr(lr),
        identity() if no_prox else _proximal_shrink(lr, weight_decay),
    )
