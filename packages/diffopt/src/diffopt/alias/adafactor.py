r"""Adafactor: adaptive steps with sublinear memory (Shazeer & Stern, 2018), as
``torch.optim.Adafactor``.

.. math::
    \theta_t = \theta_{t-1}(1 - \eta\lambda)
    - \frac{\max(\epsilon_2, \mathrm{RMS}(\theta_{t-1}))\min(\eta, t^{-1/2})}{\max(1, \mathrm{RMS}(U_t)/d)}\,U_t,
    \quad U_t = g_t / \sqrt{\hat V_t}

with the second moment :math:`\hat V_t` of matrices factored into row and column averages; see
:func:`diffopt.transform.scale_by_adafactor`.
"""

from __future__ import annotations

from diffopt.alias._utils import flip_sign_and_add_weight_decay
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform.adafactor import scale_by_accelerated_adafactor, scale_by_adafactor

__all__ = ["adafactor"]


def adafactor(
    lr=1e-2,
    beta2_decay: float = -0.8,
    eps: tuple[float | None, float] = (None, 1e-3),
    d: float = 1.0,
    weight_decay: float = 0.0,
    *,
    maximize: bool = False,
    use_accelerated_op: bool = False,
) -> GradientTransformation:
    """The functional Adafactor optimizer.

    Args:
        lr: the learning rate (a number or a tensor): it caps the relative step size and scales
            the weight decay.
        beta2_decay: the exponent of the second-moment decay ``1 - t ** beta2_decay``.
        eps: ``(eps1, eps2)``: the floor of the second moment (``None``: the dtype's machine
            epsilon) and of the parameters' RMS.
        d: the clipping threshold of the update's RMS.
        weight_decay: the decoupled weight decay.
        maximize: maximize the objective instead of minimizing it.
        use_accelerated_op: compute the step with fused-optim's fused op (its backward is exact
            through the scale factors and the factored second moment).

    Returns:
        A :class:`~diffopt.base.GradientTransformation`; its ``update`` needs ``params``.

    Example:
        >>> import torch
        >>> tx = adafactor(lr=0.1)
        >>> p = [torch.ones(2)]
        >>> tx.update([torch.tensor([5.0, -1.0])], tx.init(p), params=p)[0]
        [tensor([-0.1000,  0.1000])]
    """
    scaler = scale_by_accelerated_adafactor if use_accelerated_op else scale_by_adafactor
    return chain(
        flip_sign_and_add_weight_decay(0.0, maximize),
        scaler(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay),
    )
