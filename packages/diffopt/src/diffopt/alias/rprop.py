r"""Rprop: resilient backpropagation (Riedmiller & Braun, 1993), as ``torch.optim.Rprop``.

.. math::
    s_t = \mathrm{clip}(s_{t-1} f_t, s_{\min}, s_{\max}),\quad \theta_t = \theta_{t-1} - \mathrm{sign}(g_t)\,s_t

where :math:`f_t` is :math:`\eta_+` when the gradient kept its sign, :math:`\eta_-` when it flipped
(the element then does not move this step) and 1 otherwise; :math:`s_0 = \eta` (``lr``).
"""

from __future__ import annotations

from diffopt.alias._utils import flip_sign_and_add_weight_decay
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform.rprop import scale_by_accelerated_rprop, scale_by_rprop

__all__ = ["rprop"]


def rprop(
    lr=1e-2,
    etas: tuple[float, float] = (0.5, 1.2),
    step_sizes: tuple[float, float] = (1e-6, 50.0),
    *,
    maximize: bool = False,
    use_accelerated_op: bool = False,
) -> GradientTransformation:
    """The functional Rprop optimizer.

    Args:
        lr: the initial per-element step size (a number or a tensor).
        etas: ``(etaminus, etaplus)``: the step sizes' shrink and growth factors.
        step_sizes: ``(min, max)``: the bounds of the step sizes.
        maximize: maximize the objective instead of minimizing it.
        use_accelerated_op: compute the step with fused-optim's fused op.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = rprop(lr=0.1)
        >>> p = [torch.tensor([1.0, 1.0])]
        >>> tx.update([torch.tensor([5.0, -1.0])], tx.init(p), params=p)[0]
        [tensor([-0.1000,  0.1000])]
    """
    scaler = scale_by_accelerated_rprop if use_accelerated_op else scale_by_rprop
    return chain(
        flip_sign_and_add_weight_decay(0.0, maximize),
        scaler(lr=lr, etas=etas, step_sizes=step_sizes),
    )
