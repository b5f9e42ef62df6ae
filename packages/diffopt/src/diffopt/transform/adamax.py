r"""AdaMax's scaling (Kingma & Ba, 2014, sec. 7), with torch.optim.Adamax's conventions.

.. math::
    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad
    u_t = \max(\beta_2 u_{t-1}, |g_t| + \epsilon), \quad
    d_t = \frac{m_t}{(1-\beta_1^t)\, u_t}

Example:
    The first step is the sign of the gradient (without ``eps``), up to the rounding of the decay
    and its bias correction: rounded, since its last bit differs between machines.

    >>> import torch
    >>> tx = scale_by_adamax(eps=0.0)
    >>> u, _ = tx.update([torch.tensor([-4.0])], tx.init([torch.zeros(1)]))
    >>> torch.round(u[0], decimals=4)
    tensor([-1.])
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import (
    bias_correction,
    check_leaf,
    flatten_updates,
    per_dtype,
    unflatten,
    zeros_like_params,
)

__all__ = ["ScaleByAdamaxState", "scale_by_adamax"]


class ScaleByAdamaxState(NamedTuple):
    """State of :func:`scale_by_adamax`: first moments, infinity norms, step count.

    Attributes:
        mu: exponential moving average of the updates.
        nu: exponentially weighted infinity norm of the updates, ``max(b2 * nu, |g|)``.
        count: number of updates made so far (an int64 0-d tensor).

    Example:
        >>> import torch
        >>> tx = scale_by_adamax()
        >>> _, state = tx.update({'w': torch.tensor([2.0, -1.0])}, tx.init({'w': torch.zeros(2)}))
        >>> state.mu['w'], state.nu['w'], int(state.count)
        (tensor([ 0.2000, -0.1000]), tensor([2., 1.]), 1)
    """

    mu: object
    nu: object
    count: torch.Tensor


def scale_by_adamax(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                    moment_requires_grad: bool = False) -> GradientTransformation:
    """Rescale updates by Adam's first moment over an exponentially weighted infinity norm.

    Args:
        b1: decay of the first moment.
        b2: decay of the infinity norm.
        eps: added to ``|g|`` inside the maximum.
        moment_requires_grad: create the moments with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByAdamaxState`.

    Example:
        >>> import torch
        >>> scale_by_adamax().init([torch.zeros(1)]).count
        tensor(0)
    """
    for label, beta in (("b1", b1), ("b2", b2)):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"scale_by_adamax: {label} must be in [0, 1), got {beta}")
    if eps < 0.0:
        raise ValueError(f"scale_by_adamax: eps must be non-negative, got {eps}")

    def init_fn(params):
        return ScaleByAdamaxState(
            mu=zeros_like_params("scale_by_adamax", params, requires_grad=moment_requires_grad),
            nu=zeros_like_params("scale_by_adamax", params, requires_grad=moment_requires_grad),
            count=torch.zeros((), dtype=torch.int64),
        )

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (mus, nus) = flatten_updates(
            "scale_by_adamax", updates, state.mu, state.nu
        )
        count = state.count + 1
        bc1 = per_dtype(lambda dtype: bias_correction(b1, count, dtype))
        new_updates, new_mus, new_nus = [], [], []
        for i, (g, m, u) in enumerate(zip(grads, mus, nus)):
            if g is None:
                new_updates.append(None)
                new_mus.append(m)
                new_nus.append(u)
                continue
            check_leaf("scale_by_adamax", i, g, m)
            m = m * b1 + g * (1 - b1)
            u = torch.maximum(u * b2, g.abs() + eps)
            new_updates.append(m / (u * bc1(m.dtype)))
            new_mus.append(m)
            new_nus.append(u)
        new_state = ScaleByAdamaxState(mu=unflatten(treespec, new_mus),
                                       nu=unflatten(treespec, new_nus), count=count)
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(init_fn, update_fn)
