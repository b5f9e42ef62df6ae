r"""Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms", arXiv:2302.06675).

.. math::
    c_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad
    \theta_t = \theta_{t-1} - \eta\,(\mathrm{sign}(c_t) + \lambda \theta_{t-1}), \quad
    m_t = \beta_2 m_{t-1} + (1-\beta_2) g_t

as ``fused_optim.Lion`` (which multiplies the weights by :math:`1-\eta\lambda` first: the same
update). A meta-gradient does not flow through ``sign``: it reaches the parameters through the
decay and the gradients through the momentum.
"""

from __future__ import annotations

from diffopt.alias._utils import check_lr, flip_sign_and_add_weight_decay, scale_by_neg_lr
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform import add_decayed_weights, scale_by_accelerated_lion, scale_by_lion

__all__ = ["lion"]


def lion(
    lr=1e-4,
    betas: tuple[float, float] = (0.9, 0.99),
    weight_decay: float = 0.0,
    *,
    mask=None,
    moment_requires_grad: bool = False,
    maximize: bool = False,
    use_accelerated_op: bool = False,
) -> GradientTransformation:
    """The functional Lion optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``); the paper advises
            3-10x smaller than AdamW's.
        betas: interpolation weight of the momentum in the direction, and decay of the momentum.
        weight_decay: decoupled weight decay factor.
        mask: pytree of booleans (or a function of the params returning one) selecting which
            parameters are decayed.
        moment_requires_grad: create the momentum with ``requires_grad=True``.
        maximize: maximize the objective instead of minimizing it.
        use_accelerated_op: compute the momentum and direction with fused-optim's fused op.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = lion(lr=0.1, weight_decay=1.0)
        >>> params = [torch.tensor([2.0, 2.0])]
        >>> tx.update([torch.tensor([1.0, -1.0])], tx.init(params), params=params)[0]
        [tensor([-0.3000, -0.1000])]
    """
    check_lr("lion", lr)
    b1, b2 = betas
    scaler = scale_by_accelerated_lion if use_accelerated_op else scale_by_lion
    return chain(
        flip_sign_and_add_weight_decay(0.0, maximize),
        scaler(b1=b1, b2=b2, moment_requires_grad=moment_requires_grad),
        add_decayed_weights(weight_decay, mask),
        scale_by_neg_lr(lr),
    )
