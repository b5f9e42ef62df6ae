r"""AdaDelta (Zeiler, 2012, arXiv:1212.5701), as ``torch.optim.Adadelta``.

.. math::
    v_t = \rho v_{t-1} + (1-\rho) g_t^2, \quad
    \Delta_t = \frac{\sqrt{a_{t-1}+\epsilon}}{\sqrt{v_t+\epsilon}} g_t, \quad
    a_t = \rho a_{t-1} + (1-\rho)\Delta_t^2, \quad \theta_t = \theta_{t-1} - \eta \Delta_t
"""

from __future__ import annotations

from diffopt.alias._utils import check_lr, flip_sign_and_add_weight_decay, scale_by_neg_lr
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform import scale_by_adadelta

__all__ = ["adadelta"]


def adadelta(
    lr=1e-3,
    rho: float = 0.9,
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    *,
    moment_requires_grad: bool = False,
    maximize: bool = False,
) -> GradientTransformation:
    """The functional AdaDelta optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        rho: decay of the running averages.
        eps: added inside the roots.
        weight_decay: L2 penalty added to the gradient.
        moment_requires_grad: create the averages with ``requires_grad=True``.
        maximize: maximize the objective instead of minimizing it.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = adadelta(lr=1.0, rho=0.0, eps=1.0)
        >>> p = [torch.tensor([0.0])]
        >>> tx.update([torch.tensor([0.0])], tx.init(p), params=p)[0]
        [tensor([-0.])]
    """
    check_lr("adadelta", lr)
    return chain(
        flip_sign_and_add_weight_decay(weight_decay, maximize),
        scale_by_adadelta(rho=rho, eps=eps, moment_requires_grad=moment_requires_grad),
        scale_by_neg_lr(lr),
    )
