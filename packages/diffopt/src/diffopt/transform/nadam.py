r"""NAdam's scaling (Dozat, 2016), with torch.optim.NAdam's momentum schedule.

With :math:`\mu_t = \beta_1 (1 - \tfrac12 0.96^{t\psi})` and :math:`\Pi_t = \mu_1\cdots\mu_t`,
the update is the Nesterov-style mix of the gradient and the first moment over Adam's
denominator:

.. math::
    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2,\quad
    d_t = \sqrt{v_t / (1-\beta_2^t)} + \epsilon,\\
    u_t = \frac{1-\mu_t}{1-\Pi_t}\,\frac{g_t}{d_t} + \frac{\mu_{t+1}}{1-\Pi_t\mu_{t+1}}\,\frac{m_t}{d_t}

:math:`\Pi_t` is kept in the optimizer state as torch keeps it (a 0-d tensor of the default
float type), so the steps agree with ``torch.optim.NAdam`` to rounding.

Example:
    >>> import torch
    >>> tx = scale_by_nadam()
    >>> torch.round(tx.update([torch.tensor([3.0])], tx.init([torch.zeros(1)]))[0][0], decimals=4)
    tensor([1.0565])
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import (
    check_leaf,
    count_power,
    flatten_updates,
    fused_op_cannot_read,
    per_dtype,
    tensor_hyperparams,
    unflatten,
    zeros_like_params,
)
from diffopt.tree_math import safe_sqrt
from fused_optim.functional import nadam_momentum

__all__ = ["ScaleByNAdamState", "scale_by_accelerated_nadam", "scale_by_nadam"]


class ScaleByNAdamState(NamedTuple):
    """State of :func:`scale_by_nadam`: moments, momentum product and step count.

    Attributes:
        mu: exponential moving average of the updates.
        nu: exponential moving average of the squared updates.
        mu_product: the product of the momentum coefficients so far (a 0-d tensor of the default
            float type, as ``torch.optim.NAdam`` keeps it).
        count: number of updates made so far (an int64 0-d tensor).

    Example:
        >>> import torch
        >>> state = scale_by_nadam().init({'w': torch.zeros(2)})
        >>> state.mu_product, int(state.count)
        (tensor(1.), 0)
    """

    mu: object
    nu: object
    mu_product: torch.Tensor
    count: torch.Tensor


def _check(name: str, b1: float, b2: float, eps: float, momentum_decay: float) -> None:
    for label, beta in (("b1", b1), ("b2", b2)):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"{name}: {label} must be in [0, 1), got {beta}")
    if eps < 0.0:
        raise ValueError(f"{name}: eps must be non-negative, got {eps}")
    if momentum_decay < 0.0:
        raise ValueError(f"{name}: momentum_decay must be non-negative, got {momentum_decay}")


def _init_fn(name: str, moment_requires_grad: bool):
    def init_fn(params):
        return ScaleByNAdamState(
            mu=zeros_like_params(name, params, requires_grad=moment_requires_grad),
            nu=zeros_like_params(name, params, requires_grad=moment_requires_grad),
            mu_product=torch.ones((), dtype=torch.get_default_dtype()),
            count=torch.zeros((), dtype=torch.int64),
        )

    return init_fn


def scale_by_nadam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, momentum_decay: float = 4e-3,
                   moment_requires_grad: bool = False) -> GradientTransformation:
    """Rescale updates by NAdam's Nesterov-mixed, bias-corrected moment estimates.

    Args:
        b1: decay of the first moment (the momentum schedule's ceiling).
        b2: decay of the second moment.
        eps: added to the denominator outside the square root.
        momentum_decay: the schedule's decay :math:`\\psi`.
        moment_requires_grad: create the moments with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByNAdamState`.

    Example:
        >>> import torch
        >>> scale_by_nadam().init({'w': torch.zeros(1)}).nu
        {'w': tensor([0.])}
    """
    name = "scale_by_nadam"
    _check(name, b1, b2, eps, momentum_decay)

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (mus, nus) = flatten_updates(name, updates, state.mu, state.nu)
        count = state.count + 1
        t = count.to(torch.float64)
        mu_t, mu_next = nadam_momentum(t, b1, momentum_decay), nadam_momentum(t + 1, b1, momentum_decay)
        # torch.optim multiplies its stored product in place: rounded to the product's dtype.
        mu_product = state.mu_product * mu_t.to(state.mu_product.dtype)
        product = mu_product.to(torch.float64)
        grad_coef = per_dtype(((1.0 - mu_t) / (1.0 - product)).to)
        avg_coef = per_dtype((mu_next / (1.0 - product * mu_next)).to)
        bc2 = per_dtype((1 - count_power(b2, count)).to)
        new_updates, new_mus, new_nus = [], [], []
        for i, (g, m, v) in enumerate(zip(grads, mus, nus)):
            if g is None:
                new_updates.append(None)
                new_mus.append(m)
                new_nus.append(v)
                continue
            check_leaf(name, i, g, m)
            m = torch.lerp(m, g, 1 - b1)
            v = v * b2 + g * g * (1 - b2)
            denom = safe_sqrt(v / bc2(v.dtype)) + eps
            new_updates.append(grad_coef(g.dtype) * (g / denom) + avg_coef(g.dtype) * (m / denom))
            new_mus.append(m)
            new_nus.append(v)
        new_state = ScaleByNAdamState(mu=unflatten(treespec, new_mus), nu=unflatten(treespec, new_nus),
                                      mu_product=mu_product, count=count)
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(_init_fn(name, moment_requires_grad), update_fn)


def scale_by_accelerated_nadam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, momentum_decay: float = 4e-3,
                               moment_requires_grad: bool = False) -> GradientTransformation:
    """:func:`scale_by_nadam` computed by fused-optim's fused, differentiable NAdam op.

    Same arguments, state and results as :func:`scale_by_nadam` (up to rounding); each update is
    one fused op call with a hand-written backward. The op reads the step count and the momentum
    product as Python numbers; under ``torch.func.vmap`` with a batched count, and when traced by
    ``torch.compile``, the plain transform's math runs instead.

    Args:
        b1, b2, eps, momentum_decay, moment_requires_grad: as in :func:`scale_by_nadam`.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByNAdamState`.

    Example:
        >>> import torch
        >>> fused, plain = scale_by_accelerated_nadam(), scale_by_nadam()
        >>> g = {'w': torch.tensor([0.5, -2.0])}
        >>> u_fused, _ = fused.update(g, fused.init({'w': torch.zeros(2)}))
        >>> u_plain, _ = plain.update(g, plain.init({'w': torch.zeros(2)}))
        >>> bool(torch.allclose(u_fused['w'], u_plain['w']))
        True
    """
    name = "scale_by_accelerated_nadam"
    _check(name, b1, b2, eps, momentum_decay)
    plain = scale_by_nadam(b1, b2, eps, momentum_decay, moment_requires_grad)
    if tensor_hyperparams(b1, b2, eps, momentum_decay):  # the fused op takes numbers
        return plain

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        from diffopt.accelerated_op import fused_update

        if fused_op_cannot_read(state.count, state.mu_product):
            # The op reads the count and the product as Python numbers: batched by vmap, or
            # traced by torch.compile (no value without a graph break), the same math runs unfused.
            return plain.update(updates, state)
        treespec, grads, (mus, nus) = flatten_updates(name, updates, state.mu, state.nu)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            check_leaf(name, i, grads[i], mus[i])
        count = state.count + 1
        new_updates, new_mus, new_nus = [None] * len(grads), list(mus), list(nus)
        mu_product = state.mu_product
        if present:
            # The fused update with zero params and lr = 1 returns exactly minus the direction.
            out = fused_update(
                "nadam_update", [torch.zeros_like(grads[i]) for i in present], [grads[i] for i in present],
                [mus[i] for i in present], [nus[i] for i in present], int(count), state.mu_product,
                lr=1.0, betas=(b1, b2), eps=eps, momentum_decay=momentum_decay)
            for j, i in enumerate(present):
                new_updates[i] = -out.params[j]
                new_mus[i] = out.exp_avgs[j]
                new_nus[i] = out.exp_avg_sqs[j]
            mu_product = out.mu_product
        else:
            mu_product = plain.update([], state._replace(mu=[], nu=[]))[1].mu_product
        new_state = ScaleByNAdamState(mu=unflatten(treespec, new_mus), nu=unflatten(treespec, new_nus),
                                      mu_product=mu_product, count=count)
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(_init_fn(name, moment_requires_grad), update_fn)
