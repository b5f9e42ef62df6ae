r"""Rectified Adam's scaling (Liu et al., 2019, arXiv:1908.03265), as in torch.optim.RAdam.

With :math:`\rho_\infty = 2/(1-\beta_2) - 1` and
:math:`\rho_t = \rho_\infty - 2t\beta_2^t/(1-\beta_2^t)`, the update is the bias-corrected first
moment, multiplied (once :math:`\rho_t > 5`) by the rectification
:math:`r_t = \sqrt{(\rho_t-4)(\rho_t-2)\rho_\infty / ((\rho_\infty-4)(\rho_\infty-2)\rho_t)}`
and the adaptive factor :math:`\sqrt{1-\beta_2^t} / (\sqrt{v_t} + \epsilon)`.

Example:
    While :math:`\rho_t \le 5` (the first steps) the update is the bias-corrected momentum,
    the gradient itself on the first step, up to the rounding of the decay and its correction:
    rounded, since its last bit differs between machines.

    >>> import torch
    >>> tx = scale_by_radam()
    >>> u, _ = tx.update([torch.tensor([3.0])], tx.init([torch.zeros(1)]))
    >>> torch.round(u[0], decimals=4)
    tensor([3.])
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import (
    bias_correction,
    check_leaf,
    count_power,
    flatten_updates,
    per_dtype,
    unflatten,
    zeros_like_params,
)
from diffopt.tree_math import safe_sqrt

__all__ = ["ScaleByRAdamState", "scale_by_radam"]


class ScaleByRAdamState(NamedTuple):
    """State of :func:`scale_by_radam`: first moments, second moments, step count.

    Attributes:
        mu: exponential moving average of the updates.
        nu: exponential moving average of the squared updates.
        count: number of updates made so far (an int64 0-d tensor).

    Example:
        >>> import torch
        >>> tx = scale_by_radam()
        >>> _, state = tx.update({'w': torch.tensor([2.0, -1.0])}, tx.init({'w': torch.zeros(2)}))
        >>> state.mu['w'], state.nu['w'], int(state.count)
        (tensor([ 0.2000, -0.1000]), tensor([0.0040, 0.0010]), 1)
    """

    mu: object
    nu: object
    count: torch.Tensor


def scale_by_radam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                   moment_requires_grad: bool = False) -> GradientTransformation:
    """Rescale updates by Rectified Adam's variance-rectified moment estimates.

    Args:
        b1: decay of the first moment.
        b2: decay of the second moment.
        eps: added to the root of the second moment.
        moment_requires_grad: create the moments with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByRAdamState`.

    Example:
        >>> import torch
        >>> scale_by_radam().init({'w': torch.zeros(1)}).mu
        {'w': tensor([0.])}
    """
    for label, beta in (("b1", b1), ("b2", b2)):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"scale_by_radam: {label} must be in [0, 1), got {beta}")
    if eps < 0.0:
        raise ValueError(f"scale_by_radam: eps must be non-negative, got {eps}")
    rho_inf = 2.0 / (1.0 - b2) - 1.0
    never_rectified = rho_inf <= 5.0  # rho_t < rho_inf for every t

    def _rectification(count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rho_t > 5, r_t * sqrt(1 - b2^t))`` as float64 tensors; the factor is 0 if not."""
        b2_t = count_power(b2, count)
        rho_t = rho_inf - 2 * count.to(torch.float64) * b2_t / (1 - b2_t)
        rectified = rho_t > 5.0
        ratio = ((rho_t - 4) * (rho_t - 2) * rho_inf
                 / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        root = torch.sqrt(torch.where(rectified, ratio, 1.0) * (1 - b2_t))
        return rectified, torch.where(rectified, root, 0.0)

    def init_fn(params):
        return ScaleByRAdamState(
            mu=zeros_like_params("scale_by_radam", params, requires_grad=moment_requires_grad),
            nu=zeros_like_params("scale_by_radam", params, requires_grad=moment_requires_grad),
            count=torch.zeros((), dtype=torch.int64),
        )

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (mus, nus) = flatten_updates(
            "scale_by_radam", updates, state.mu, state.nu
        )
        count = state.count + 1
        bc1 = per_dtype(lambda dtype: bias_correction(b1, count, dtype))
        rectified, factor = _rectification(count)
        factor_as = per_dtype(factor.to)
        new_updates, new_mus, new_nus = [], [], []
        for i, (g, m, v) in enumerate(zip(grads, mus, nus)):
            if g is None:
                new_updates.append(None)
                new_mus.append(m)
                new_nus.append(v)
                continue
            check_leaf("scale_by_radam", i, g, m)
            m = m * b1 + g * (1 - b1)
            v = v * b2 + g * g * (1 - b2)
            m_hat = m / bc1(m.dtype)
            if never_rectified:
                new_updates.append(m_hat)
            else:
                # Both branches are computed and one selected by the (tensor) test, so a count
                # batched by vmap can take either; the unselected one is finite, so its zero
                # cotangent stays zero.
                denom = safe_sqrt(v) + eps if eps else torch.where(rectified, safe_sqrt(v), 1.0)
                scaled = m_hat * (factor_as(m.dtype) / denom)
                new_updates.append(torch.where(rectified, scaled, m_hat))
            new_mus.append(m)
            new_nus.append(v)
        new_state = ScaleByRAdamState(mu=unflatten(treespec, new_mus),
                                      nu=unflatten(treespec, new_nus), count=count)
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(init_fn, update_fn)
