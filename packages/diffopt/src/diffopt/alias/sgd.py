r"""Stochastic gradient descent with optional momentum, as ``torch.optim.SGD``.

.. math::
    g_t \leftarrow g_t + \lambda \theta_{t-1}, \quad
    b_t = \mu b_{t-1} + (1-\tau) g_t \;(b_1 = g_1), \quad
    \theta_t = \theta_{t-1} - \eta\,(b_t \text{ or } g_t + \mu b_t \text{ if Nesterov})

References: Robbins & Monro, 1951; Sutskever et al., 2013 (momentum and Nesterov).
"""

from __future__ import annotations

from diffopt.alias._utils import (
    check_lr,
    flip_sign_and_add_weight_decay,
    reuse_for_numbers,
    scale_by_neg_lr,
)
from diffopt.base import GradientTransformation, identity
from diffopt.combine import chain
from diffopt.transform import trace

__all__ = ["sgd"]


@reuse_for_numbers
def sgd(
    lr,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    *,
    moment_requires_grad: bool = False,
    maximize: bool = False,
) -> GradientTransformation:
    """The functional SGD optimizer.

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        momentum: momentum factor (0 disables momentum).
        dampening: dampening of the momentum.
        weight_decay: L2 penalty added to the gradient.
        nesterov: use Nesterov momentum.
        moment_requires_grad: create the momentum buffers with ``requires_grad=True``.
        maximize: maximize the objective instead of minimizing it.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> import diffopt
        >>> params = {'w': torch.tensor([1.0])}
        >>> tx = sgd(lr=0.5, momentum=0.9)
        >>> updates, _ = tx.update({'w': torch.tensor([2.0])}, tx.init(params), params=params)
        >>> diffopt.apply_updates(params, updates)['w']
        tensor([0.])
    """
    check_lr("sgd", lr)
    if momentum < 0.0:
        raise ValueError(f"sgd: invalid momentum {momentum}; it must be >= 0")
    return chain(
        flip_sign_and_add_weight_decay(weight_decay, maximize),
        trace(momentum, dampening, nesterov, moment_requires_grad)
        if momentum != 0.0 else identity(),
        scale_by_neg_lr(lr),
    )

