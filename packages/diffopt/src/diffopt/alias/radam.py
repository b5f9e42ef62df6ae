r"""RAdam: Adam with a rectified adaptive learning rate (Liu et al., 2019, arXiv:1908.03265).

While the variance of the adaptive rate is intractable (:math:`\rho_t \le 5`) the step is plain
bias-corrected momentum; afterwards it is Adam's step times the rectification :math:`r_t`, as
``torch.optim.RAdam``.
"""

from __future__ import annotations

from diffopt.alias._utils import check_lr, flip_sign_and_add_weight_decay, scale_by_neg_lr
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform import scale_by_radam

__all__ = ["radam"]


def radam(
    lr=1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    *,
    moment_requires_grad: bool = False,
    maximize: bool = False,
) -> GradientTransformation:
    """The functional RAdam optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first and second moments.
        eps: added to the root of the second moment.
        weight_decay: L2 penalty added to the gradient.
        moment_requires_grad: create the moments with ``requires_grad=True``.
        maximize: maximize the objective instead of minimizing it.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = radam(lr=0.1)
        >>> p = [torch.tensor([0.0])]
        >>> tx.update([torch.tensor([2.0])], tx.init(p), params=p)[0]
        [tensor([-0.2000])]
    """
    check_lr("radam", lr)
    b1, b2 = betas
    return chain(
        flip_sign_and_add_weight_decay(weight_decay, maximize),
        scale_by_radam(b1=b1, b2=b2, eps=eps, moment_requires_grad=moment_requires_grad),
        scale_by_neg_lr(lr),
    )
