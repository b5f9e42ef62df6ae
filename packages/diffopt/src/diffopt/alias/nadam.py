r"""NAdam: Adam with Nesterov momentum (Dozat, 2016), as ``torch.optim.NAdam``.

.. math::
    \theta_t = \theta_{t-1} - \eta\Big(\frac{1-\mu_t}{1-\Pi_t}\frac{g_t}{d_t}
    + \frac{\mu_{t+1}}{1-\Pi_t\mu_{t+1}}\frac{m_t}{d_t}\Big),\quad
    d_t = \sqrt{v_t/(1-\beta_2^t)} + \epsilon,\quad \mu_t = \beta_1(1 - \tfrac12 0.96^{t\psi})

with the L2 penalty :math:`\lambda\theta` added to :math:`g_t`, or with
``decoupled_weight_decay`` the decay :math:`\theta \leftarrow \theta(1-\eta\lambda)` (NAdamW).
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
from diffopt.transform import add_decayed_weights
from diffopt.transform.nadam import scale_by_accelerated_nadam, scale_by_nadam

__all__ = ["nadam"]


def nadam(
    lr=2e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum_decay: float = 4e-3,
    *,
    decoupled_weight_decay: bool = False,
    moment_requires_grad: bool = False,
    maximize: bool = False,
    use_accelerated_op: bool = False,
) -> GradientTransformation:
    """The functional NAdam optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        betas: decays of the first and second moments.
        eps: added to the denominator outside the root.
        weight_decay: weight decay coefficient (an L2 penalty, or decoupled).
        momentum_decay: decay :math:`\\psi` of the momentum schedule.
        decoupled_weight_decay: decay the weights directly, as AdamW does, instead of adding an
            L2 penalty to the gradient.
        moment_requires_grad: create the moments with ``requires_grad=True``.
        maximize: maximize the objective instead of minimizing it.
        use_accelerated_op: compute the moments and direction with fused-optim's fused op.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = nadam(lr=0.1)
        >>> p = [torch.tensor([1.0])]
        >>> torch.round(tx.update([torch.tensor([5.0])], tx.init(p), params=p)[0][0], decimals=4)
        tensor([-0.1056])
    """
    check_lr("nadam", lr)
    check_weight_decay("nadam", weight_decay)
    b1, b2 = betas
    scaler = scale_by_accelerated_nadam if use_accelerated_op else scale_by_nadam
    decoupled = decoupled_weight_decay and weight_decay != 0.0
    return chain(
        flip_sign_and_add_weight_decay(0.0 if decoupled else weight_decay, maximize),
        scaler(b1=b1, b2=b2, eps=eps, momentum_decay=momentum_decay, moment_requires_grad=moment_requires_grad),
        add_decayed_weights(weight_decay) if decoupled else identity(),
        scale_by_neg_lr(lr),
    )
