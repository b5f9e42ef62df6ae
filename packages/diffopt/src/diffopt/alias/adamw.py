r"""AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, 2017, arXiv:1711.05101).

.. math::
    \theta_t = \theta_{t-1} - \eta \left(\frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}}
    + \epsilon} + \lambda \theta_{t-1}\right)

as ``torch.optim.AdamW`` (which multiplies the weights by :math:`1-\eta\lambda` first: the same
update).
"""

from __future__ import annotations

from diffopt.alias._utils import check_lr, flip_sign_and_add_weight_decay, scale_by_neg_lr
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform import add_decayed_weights, scale_by_accelerated_adam, scale_by_adam

__all__ = ["adamw"]


def adamw(
    lr=1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
    *,
    eps_root: float = 0.0,
    mask=None,
    moment_requires_grad: bool = False,
    maximize: bool = False,
    use_accelerated_op: bool = False,
) -> GradientTransformation:
    """The functional AdamW optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first and second moments.
        eps: added to the denominator outside the root.
        weight_decay: decoupled weight decay factor.
        eps_root: added to the second moment inside the root.
        mask: pytree of booleans (or a function of the params returning one) selecting which
            parameters are decayed.
        moment_requires_grad: create the moments with ``requires_grad=True``.
        maximize: maximize the objective instead of minimizing it.
        use_accelerated_op: compute the moments and direction with fused-optim's fused op.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = adamw(lr=0.1, weight_decay=1.0)
        >>> params = [torch.tensor([2.0])]
        >>> tx.update([torch.tensor([1.0])], tx.init(params), params=params)[0]
        [tensor([-0.3000])]
    """
    check_lr("adamw", lr)
    b1, b2 = betas
    scaler = scale_by_accelerated_adam if use_accelerated_op else scale_by_adam
    return chain(
        flip_sign_and_add_weight_decay(0.0, maximize),
        scaler(b1=b1, b2=b2, eps=eps, eps_root=eps_root,
               moment_requires_grad=moment_requires_grad),
        add_decayed_weights(weight_decay, mask),
        scale_by_neg_lr(lr),
    )
