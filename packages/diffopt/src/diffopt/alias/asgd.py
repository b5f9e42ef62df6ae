r"""ASGD: averaged stochastic gradient descent (Polyak & Juditsky, 1992), as ``torch.optim.ASGD``.

.. math::
    \theta_t = \theta_{t-1}(1 - \lambda\eta_{t-1}) - \eta_{t-1}(g_t + w\theta_{t-1}),\quad
    \eta_t = \frac{\eta_0}{(1 + \lambda\eta_0 t)^\alpha}

with the averaged iterate :math:`\bar\theta_t` (uniform from step ``t0``) kept in the state's
``ax``; see :func:`diffopt.transform.scale_by_asgd`.
"""

from __future__ import annotations

from diffopt.alias._utils import flip_sign_and_add_weight_decay
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform.asgd import scale_by_accelerated_asgd, scale_by_asgd

__all__ = ["asgd"]


def asgd(
    lr=1e-2,
    lambd: float = 1e-4,
    alpha: float = 0.75,
    t0: float = 1e6,
    weight_decay: float = 0.0,
    *,
    maximize: bool = False,
    use_accelerated_op: bool = False,
) -> GradientTransformation:
    """The functional ASGD optimizer.

    Args:
        lr: the initial step size (a number or a tensor).
        lambd: the decay term.
        alpha: the power of the step-size decay.
        t0: the step at which averaging starts.
        weight_decay: L2 penalty added to the gradient.
        maximize: maximize the objective instead of minimizing it.
        use_accelerated_op: compute the step with fused-optim's fused op.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`; its ``update`` needs ``params``.

    Example:
        >>> import torch
        >>> tx = asgd(lr=0.1, lambd=0.0)
        >>> p = [torch.tensor([1.0])]
        >>> tx.update([torch.tensor([5.0])], tx.init(p), params=p)[0]
        [tensor([-0.5000])]
    """
    scaler = scale_by_accelerated_asgd if use_accelerated_op else scale_by_asgd
    return chain(
        flip_sign_and_add_weight_decay(weight_decay, maximize),
        scaler(lr=lr, lambd=lambd, alpha=alpha, t0=t0),
    )
