r"""AdaDelta's scaling (Zeiler, 2012, arXiv:1212.5701), with torch.optim.Adadelta's conventions.

.. math::
    v_t = \rho v_{t-1} + (1-\rho) g_t^2, \quad
    u_t = \frac{\sqrt{a_{t-1} + \epsilon}}{\sqrt{v_t + \epsilon}} g_t, \quad
    a_t = \rho a_{t-1} + (1-\rho) u_t^2

Example:
    >>> import torch
    >>> tx = scale_by_adadelta(rho=0.0, eps=1.0)
    >>> tx.update([torch.tensor([0.0])], tx.init([torch.zeros(1)]))[0]
    [tensor([0.])]
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import check_leaf, flatten_updates, unflatten, zeros_like_params

__all__ = ["ScaleByAdaDeltaState", "scale_by_adadelta"]


class ScaleByAdaDeltaState(NamedTuple):
    """State of :func:`scale_by_adadelta`: running mean of squared gradients and of squared updates.

    Attributes:
        mu: exponential moving average of the squared gradients.
        nu: exponential moving average of the squared updates this transformation produced.

    Example:
        >>> import torch
        >>> tx = scale_by_adadelta(rho=0.9, eps=1e-6)
        >>> _, state = tx.update({'w': torch.tensor([2.0, -1.0])}, tx.init({'w': torch.zeros(2)}))
        >>> state.mu['w'], [round(v, 8) for v in state.nu['w'].tolist()]
        (tensor([0.4000, 0.1000]), [1e-06, 1e-06])
    """

    mu: object
    nu: object


def scale_by_adadelta(rho: float = 0.9, eps: float = 1e-6,
                      moment_requires_grad: bool = False) -> GradientTransformation:
    """Rescale updates by the ratio of running RMS of past updates to running RMS of gradients.

    Args:
        rho: decay of both running averages.
        eps: added inside both roots.
        moment_requires_grad: create the averages with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByAdaDeltaState`.

    Example:
        >>> import torch
        >>> tx = scale_by_adadelta(rho=0.0, eps=0.0)
        >>> state = tx.init([torch.zeros(1)])
        >>> u, state = tx.update([torch.tensor([2.0])], state)
        >>> u
        [tensor([0.])]
    """
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"scale_by_adadelta: rho must be in [0, 1], got {rho}")
    if eps < 0.0:
        raise ValueError(f"scale_by_adadelta: eps must be non-negative, got {eps}")

    def init_fn(params):
        return ScaleByAdaDeltaState(
            mu=zeros_like_params("scale_by_adadelta", params, requires_grad=moment_requires_grad),
            nu=zeros_like_params("scale_by_adadelta", params, requires_grad=moment_requires_grad),
        )

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (mus, nus) = flatten_updates(
            "scale_by_adadelta", updates, state.mu, state.nu
        )
        new_updates, new_mus, new_nus = [], [], []
        for i, (g, m, a) in enumerate(zip(grads, mus, nus)):
            if g is None:
                new_updates.append(None)
                new_mus.append(m)
                new_nus.append(a)
                continue
            check_leaf("scale_by_adadelta", i, g, m)
            m = m * rho + g * g * (1 - rho)
            u = torch.sqrt(a + eps) / torch.sqrt(m + eps) * g
            a = a * rho + u * u * (1 - rho)
            new_updates.append(u)
            new_mus.append(m)
            new_nus.append(a)
        new_state = ScaleByAdaDeltaState(mu=unflatten(treespec, new_mus),
                                         nu=unflatten(treespec, new_nus))
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(init_fn, update_fn)
