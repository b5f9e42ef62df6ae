r"""AdaMax (Kingma & Ba, 2014, arXiv:1412.6980, sec. 7), as ``torch.optim.Adamax``.

.. math::
    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad u_t = \max(\beta_2 u_{t-1}, |g_t| + \epsilon),
    \quad \theta_t = \theta_{t-1} - \frac{\eta}{1-\beta_1^t} \frac{m_t}{u_t}
"""

from __future__ import annotations

from diffopt.alias._utils import check_lr, flip_sign_and_add_weight_decay, scale_by_neg_lr
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform import scale_by_adamax

__all__ = ["adamax"]


def adamax(
    lr=1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    *,
    moment_requires_grad: bool = False,
    maximize: bool = False,
) -> GradientTransformation:
    """The functional AdaMax optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first moment and of the infinity norm.
        eps: added to ``|g|`` inside the maximum.
        weight_decay: L2 penalty added to the gradient.
        moment_requires_grad: create the moments with ``requires_grad=True``.
        maximize: maximize the objective instead of minimizing it.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = adamax(lr=0.1, eps=0.0)
        >>> p = [torch.tensor([0.0])]
        >>> tx.update([torch.tensor([2.0])], tx.init(p), params=p)[0]
        [tensor([-0.1000])]
    """
    check_lr("adamax", lr)
    b1, b2 = betas
    return chain(
        flip_sign_and_add_weight_decay(weight_decay, maximize),
        scale_by_adamax(b1=b1, b2=b2, eps=eps, moment_requires_grad=moment_requires_grad),
        scale_by_neg_lr(lr),
    )
