r"""Adam (Kingma & Ba, 2014, arXiv:1412.6980), as ``torch.optim.Adam``.

.. math::
    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2,
    \quad \theta_t = \theta_{t-1} - \eta \frac{m_t/(1-\beta_1^t)}
    {\sqrt{v_t/(1-\beta_2^t) + \epsilon_{root}} + \epsilon}

with the L2 penalty :math:`\lambda\theta` added to :math:`g_t` when ``weight_decay > 0``.
"""

from __future__ import annotations

from diffopt.alias._utils import (
    check_lr,
    flip_sign_and_add_weight_decay,
    reuse_for_numbers,
    scale_by_neg_lr,
)
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform import scale_by_accelerated_adam, scale_by_adam

__all__ = ["adam"]


@reuse_for_numbers
def adam(
    lr=1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    *,
    eps_root: float = 0.0,
    moment_requires_grad: bool = False,
    maximize: bool = False,
    use_accelerated_op: bool = False,
) -> GradientTransformation:
    """The functional Adam optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first and second moments.
        eps: added to the denominator outside the root.
        weight_decay: L2 penalty added to the gradient.
        eps_root: added to the second moment inside the root.
        moment_requires_grad: create the moments with ``requires_grad=True``.
        maximize: maximize the objective instead of minimizing it.
        use_accelerated_op: compute the moments and direction with fused-optim's fused op.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = adam(lr=0.1)
        >>> params = [torch.tensor([1.0])]
        >>> updates, state = tx.update([torch.tensor([5.0])], tx.init(params), params=params)
        >>> updates
        [tensor([-0.1000])]
    """
    check_lr("adam", lr)
    b1, b2 = betas
    scaler = scale_by_accelerated_adam if use_accelerated_op else scale_by_adam
    return chain(
        flip_sign_and_add_weight_decay(weight_decay, maximize),
        scaler(b1=b1, b2=b2, eps=eps, eps_root=eps_root,
               moment_requires_grad=moment_requires_grad),
        scale_by_neg_lr(lr),
    )
