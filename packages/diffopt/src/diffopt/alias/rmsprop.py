r"""RMSprop (Hinton, 2012, Lecture 6e; Graves, 2013 for the centered form), as torch.optim.RMSprop.

.. math::
    \nu_t = \alpha \nu_{t-1} + (1-\alpha) g_t^2, \quad
    d_t = \frac{g_t}{\sqrt{\nu_t - [\text{centered}]\,\bar g_t^2} + \epsilon}, \quad
    \theta_t = \theta_{t-1} - \eta\, \mathrm{momentum}(d_t)
"""

from __future__ import annotations

from diffopt.alias._utils import check_lr, flip_sign_and_add_weight_decay, scale_by_neg_lr
from diffopt.base import GradientTransformation, identity
from diffopt.combine import chain
from diffopt.transform import scale_by_rms, scale_by_stddev, trace

__all__ = ["rmsprop"]


def rmsprop(
    lr=1e-2,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    centered: bool = False,
    *,
    initial_scale: float = 0.0,
    nesterov: bool = False,
    maximize: bool = False,
) -> GradientTransformation:
    """The functional RMSprop optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        alpha: smoothing constant of the mean of squares.
        eps: added to the root.
        weight_decay: L2 penalty added to the gradient.
        momentum: momentum factor applied to the rescaled gradient.
        centered: normalize by the estimated variance instead of the mean of squares.
        initial_scale: initial value of the mean of squares.
        nesterov: use Nesterov momentum.
        maximize: maximize the objective instead of minimizing it.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = rmsprop(lr=0.1, alpha=0.0, eps=0.0)
        >>> p = [torch.tensor([1.0])]
        >>> tx.update([torch.tensor([-4.0])], tx.init(p), params=p)[0]
        [tensor([0.1000])]
    """
    check_lr("rmsprop", lr)
    if momentum < 0.0:
        raise ValueError(f"rmsprop: invalid momentum {momentum}; it must be >= 0")
    scaler = scale_by_stddev if centered else scale_by_rms
    return chain(
        flip_sign_and_add_weight_decay(weight_decay, maximize),
        scaler(alpha=alpha, eps=eps, initial_scale=initial_scale),
        trace(momentum, 0.0, nesterov) if momentum != 0.0 else identity(),
        scale_by_neg_lr(lr),
    )
