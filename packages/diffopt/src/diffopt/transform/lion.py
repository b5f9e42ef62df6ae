r"""Lion's direction (Chen et al., 2023, arXiv:2302.06675): the sign of an interpolated momentum.

.. math::
    d_t = \mathrm{sign}(\beta_1 m_{t-1} + (1-\beta_1) g_t), \quad
    m_t = \beta_2 m_{t-1} + (1-\beta_2) g_t

``sign`` has a zero derivative (autograd takes 0 at 0 too), so a meta-gradient never flows through
:math:`d_t`; it reaches the gradients only through the momentum :math:`m_t`, and the parameters
through whatever the chain adds to :math:`d_t` (Lion's decoupled weight decay).

Example:
    >>> import torch
    >>> tx = scale_by_lion()
    >>> tx.update([torch.tensor([2.0, -0.5, 0.0])], tx.init([torch.zeros(3)]))[0]
    [tensor([ 1., -1.,  0.])]
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import (
    check_leaf,
    flatten_updates,
    tensor_hyperparams,
    unflatten,
    zeros_like_params,
)

__all__ = ["ScaleByLionState", "scale_by_accelerated_lion", "scale_by_lion"]


class ScaleByLionState(NamedTuple):
    """State of :func:`scale_by_lion`: the momentum.

    Attributes:
        mu: exponential moving average of the updates (decay ``b2``), shaped like the parameters.

    Example:
        >>> import torch
        >>> tx = scale_by_lion()
        >>> _, state = tx.update({'w': torch.tensor([2.0])}, tx.init({'w': torch.zeros(1)}))
        >>> state.mu['w']
        tensor([0.0200])
    """

    mu: object


def _check_betas(name: str, b1: float, b2: float) -> None:
    for label, beta in (("b1", b1), ("b2", b2)):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"{name}: {label} must be in [0, 1), got {beta}")


def _init_fn(name: str, moment_requires_grad: bool):
    def init_fn(params):
        return ScaleByLionState(mu=zeros_like_params(name, params, requires_grad=moment_requires_grad))

    return init_fn


def scale_by_lion(b1: float = 0.9, b2: float = 0.99, moment_requires_grad: bool = False) -> GradientTransformation:
    """Replace updates by the sign of Lion's interpolated momentum.

    Args:
        b1: interpolation weight of the momentum in the direction.
        b2: decay of the momentum.
        moment_requires_grad: create the momentum with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByLionState`.

    Example:
        >>> import torch
        >>> scale_by_lion().init([torch.zeros(2)]).mu
        [tensor([0., 0.])]
    """
    name = "scale_by_lion"
    _check_betas(name, b1, b2)

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (mus,) = flatten_updates(name, updates, state.mu)
        new_updates, new_mus = [], []
        for i, (g, m) in enumerate(zip(grads, mus)):
            if g is None:
                new_updates.append(None)
                new_mus.append(m)
                continue
            check_leaf(name, i, g, m)
            new_updates.append(torch.sign(m * b1 + (1 - b1) * g))
            new_mus.append(m * b2 + (1 - b2) * g)
        return unflatten(treespec, new_updates), ScaleByLionState(mu=unflatten(treespec, new_mus))

    return GradientTransformation(_init_fn(name, moment_requires_grad), update_fn)


def scale_by_accelerated_lion(b1: float = 0.9, b2: float = 0.99,
                              moment_requires_grad: bool = False) -> GradientTransformation:
    """:func:`scale_by_lion` computed by fused-optim's fused, differentiable ``lion_update``.

    Same arguments, state and results as :func:`scale_by_lion`: one fused op per leaf list, with
    its hand-written backward, runs Lion's update on zero parameters with a unit learning rate and
    no decay, which leaves minus the direction in the new parameters.

    Args:
        b1: interpolation weight of the momentum in the direction.
        b2: decay of the momentum.
        moment_requires_grad: create the momentum with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByLionState`.

    Raises:
        ImportError: at update time, when the ``fused-optim`` package is not installed.

    Example:
        >>> import torch
        >>> tx = scale_by_accelerated_lion()
        >>> tx.update([torch.tensor([2.0, -0.5, 0.0])], tx.init([torch.zeros(3)]))[0]
        [tensor([ 1., -1.,  0.])]
    """
    name = "scale_by_accelerated_lion"
    _check_betas(name, b1, b2)
    if tensor_hyperparams(b1, b2):  # the fused op takes numbers
        return scale_by_lion(b1, b2, moment_requires_grad)

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        from diffopt.accelerated_op import lion_direction

        treespec, grads, (mus,) = flatten_updates(name, updates, state.mu)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            check_leaf(name, i, grads[i], mus[i])
        new_updates, new_mus = [None] * len(grads), list(mus)
        if present:
            directions, out_mus = lion_direction([grads[i] for i in present], [mus[i] for i in present],
                                                 beta1=b1, beta2=b2)
            for j, i in enumerate(present):
                new_updates[i], new_mus[i] = directions[j], out_mus[j]
        return unflatten(treespec, new_updates), ScaleByLionState(mu=unflatten(treespec, new_mus))

    return GradientTransformation(_init_fn(name, moment_requires_grad), update_fn)
