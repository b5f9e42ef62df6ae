r"""Averaged SGD's step (Polyak & Juditsky, 1992; Bottou, 2012), as torch.optim.ASGD.

The step size :math:`\eta_t` decays, every parameter is pulled towards zero by
:math:`\lambda\eta_t`, and a running average :math:`\bar\theta` of the iterates (``ax``) is kept,
uniform from step ``t0`` on:

.. math::
    \theta_t = \theta_{t-1}(1 - \lambda\eta_{t-1}) - \eta_{t-1} g_t,\quad
    \bar\theta_t = \bar\theta_{t-1} + \mu_{t-1}(\theta_t - \bar\theta_{t-1}),\\
    \eta_t = \frac{\eta_0}{(1 + \lambda\eta_0 t)^\alpha},\quad \mu_t = \frac{1}{\max(1, t - t_0)}

The update includes the step size (it needs the parameters), so the alias adds no ``-lr``
scaling. :math:`\eta` and :math:`\mu` are kept as torch keeps them (0-d tensors of the default
float type), so the steps agree with ``torch.optim.ASGD`` to rounding.

Example:
    >>> import torch
    >>> tx = scale_by_asgd(lr=0.1, lambd=0.0)
    >>> p = [torch.ones(1)]
    >>> tx.update([torch.tensor([2.0])], tx.init(p), params=p)[0]
    [tensor([-0.2000])]
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import (
    check_leaf,
    flatten_updates,
    fused_op_cannot_read,
    unflatten,
    zeros_like_params,
)

__all__ = ["ScaleByASGDState", "scale_by_accelerated_asgd", "scale_by_asgd"]


class ScaleByASGDState(NamedTuple):
    """State of :func:`scale_by_asgd`.

    Attributes:
        ax: the running averages of the parameters.
        eta: the current step size (a 0-d tensor).
        mu: the current averaging weight (a 0-d tensor).
        count: number of updates made so far (an int64 0-d tensor).

    Example:
        >>> import torch
        >>> state = scale_by_asgd(lr=0.5).init({'w': torch.zeros(2)})
        >>> state.eta, state.mu
        (tensor(0.5000), tensor(1.))
    """

    ax: object
    eta: torch.Tensor
    mu: torch.Tensor
    count: torch.Tensor


def _check(name: str, lr, lambd: float, alpha: float, t0: float) -> None:
    if not isinstance(lr, torch.Tensor) and not lr >= 0.0:
        raise ValueError(f"{name}: invalid learning rate {lr}; it must be >= 0")
    for label, value in (("lambd", lambd), ("alpha", alpha), ("t0", t0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name}: {label} must be a number, got {type(value).__name__}")


def _init_fn(name: str, lr):
    def init_fn(params):
        dtype = torch.get_default_dtype()
        eta = lr.to(dtype) if isinstance(lr, torch.Tensor) else torch.tensor(float(lr), dtype=dtype)
        return ScaleByASGDState(ax=zeros_like_params(name, params), eta=eta, mu=torch.ones((), dtype=dtype),
                                count=torch.zeros((), dtype=torch.int64))

    return init_fn


def _schedule(lr, lambd: float, alpha: float, t0: float, count: torch.Tensor, like: torch.Tensor):
    """The next ``(eta, mu)`` after ``count`` steps, rounded to ``like``'s dtype as torch stores them."""
    t = count.to(torch.float64)
    eta = lr / (1 + lambd * lr * t) ** alpha
    mu = 1 / torch.clamp(t - t0, min=1.0)
    return eta.to(like.dtype), mu.to(like.dtype)


def scale_by_asgd(lr=1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6) -> GradientTransformation:
    """Replace updates by ASGD's decayed, weight-shrinking step and track the iterates' average.

    Args:
        lr: the initial step size :math:`\\eta_0` (a number or a tensor).
        lambd: the decay term :math:`\\lambda`.
        alpha: the power :math:`\\alpha` of the step-size decay.
        t0: the step at which averaging starts.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByASGDState`; its
        ``update`` needs ``params``.

    Example:
        >>> import torch
        >>> tx = scale_by_asgd(lr=0.1, lambd=0.0, t0=0)
        >>> p = [torch.ones(1)]
        >>> _, state = tx.update([torch.tensor([2.0])], tx.init(p), params=p)
        >>> state.ax, state.mu
        ([tensor([0.8000])], tensor(1.))
    """
    name = "scale_by_asgd"
    _check(name, lr, lambd, alpha, t0)

    def update_fn(updates, state, *, params=None, inplace=True):
        del inplace
        if params is None:
            raise ValueError(f"{name} needs params: call update(..., params=params)")
        treespec, grads, (axs, leaves) = flatten_updates(name, updates, state.ax, params)
        count = state.count + 1
        new_updates, new_axs = [], []
        for i, (g, ax, p) in enumerate(zip(grads, axs, leaves)):
            if g is None:
                new_updates.append(None)
                new_axs.append(ax)
                continue
            check_leaf(name, i, g, ax)
            eta = state.eta.to(g.dtype)
            new_p = p * (1 - lambd * eta) - eta * g
            new_updates.append(new_p - p)
            new_axs.append(torch.where(state.mu == 1, new_p, ax + (new_p - ax) * state.mu.to(g.dtype)))
        eta, mu = _schedule(lr, lambd, alpha, t0, count, state.eta)
        new_state = ScaleByASGDState(ax=unflatten(treespec, new_axs), eta=eta, mu=mu, count=count)
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(_init_fn(name, lr), update_fn)


def scale_by_accelerated_asgd(lr=1e-2, lambd: float = 1e-4, alpha: float = 0.75,
                              t0: float = 1e6) -> GradientTransformation:
    """:func:`scale_by_asgd` computed by fused-optim's fused, differentiable ASGD op.

    Same arguments, state and results as :func:`scale_by_asgd` (up to rounding). The op reads
    :math:`\\eta` and :math:`\\mu` as Python numbers; under ``torch.func.vmap`` with batched state,
    when traced by ``torch.compile``, or with a tensor ``lr`` that requires grad, the plain
    transform's math runs instead.

    Args:
        lr, lambd, alpha, t0: as in :func:`scale_by_asgd`.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByASGDState`.

    Example:
        >>> import torch
        >>> tx = scale_by_accelerated_asgd(lr=0.1, lambd=0.0)
        >>> p = [torch.ones(1)]
        >>> tx.update([torch.tensor([2.0])], tx.init(p), params=p)[0]
        [tensor([-0.2000])]
    """
    name = "scale_by_accelerated_asgd"
    _check(name, lr, lambd, alpha, t0)
    plain = scale_by_asgd(lr, lambd, alpha, t0)

    def update_fn(updates, state, *, params=None, inplace=True):
        del inplace
        from diffopt.accelerated_op import fused_update

        if params is None:
            raise ValueError(f"{name} needs params: call update(..., params=params)")
        if fused_op_cannot_read(state.eta, state.mu, state.count) or (
                isinstance(lr, torch.Tensor) and lr.requires_grad):
            return plain.update(updates, state, params=params)
        treespec, grads, (axs, leaves) = flatten_updates(name, updates, state.ax, params)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            check_leaf(name, i, grads[i], axs[i])
        count = state.count + 1
        new_updates, new_axs = [None] * len(grads), list(axs)
        if present:
            out = fused_update("asgd_update", [leaves[i] for i in present], [grads[i] for i in present],
                               [axs[i] for i in present], float(state.eta), float(state.mu), lambd=lambd)
            for j, i in enumerate(present):
                new_updates[i] = out.params[j] - leaves[i]
                new_axs[i] = out.axs[j]
        eta, mu = _schedule(lr, lambd, alpha, t0, count, state.eta)
        new_state = ScaleByASGDState(ax=unflatten(treespec, new_axs), eta=eta, mu=mu, count=count)
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(_init_fn(name, lr), update_fn)
