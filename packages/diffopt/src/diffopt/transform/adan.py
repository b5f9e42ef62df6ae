r"""Adan's direction (Xie et al., 2022/2024, arXiv:2208.06677), the betas as decay rates.

With :math:`d_t = g_t - g_{t-1}` (zero on the first step, which has no previous gradient) and
bias corrections :math:`b_k = 1 - \beta_k^t`:

.. math::
    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) d_t, \quad
    n_t = \beta_3 n_{t-1} + (1-\beta_3) (g_t + \beta_2 d_t)^2,

    u_t = \frac{m_t / b_1 + \beta_2 v_t / b_2}{\sqrt{n_t / b_3} + \epsilon}

The choices where the paper's Algorithm 1 leaves room (zero-initialised moments with bias
corrections, a zero first difference, :math:`\epsilon` outside the root) are those of the authors'
PyTorch code and of ``fused_optim.Adan``.

Example:
    On the first step the bias corrections undo the decays, so without ``eps`` the direction is
    :math:`g / |g|`, the sign of each gradient entry. It is computed through several roundings
    (the decays, two bias corrections, a square root), so it is 1 only to within about a float32
    ulp, and which neighbour of 1 comes out differs between machines: the example rounds it.

    >>> import torch
    >>> tx = scale_by_adan(eps=0.0)
    >>> u, _ = tx.update([torch.tensor([3.0, -0.5])], tx.init([torch.zeros(2)]))
    >>> torch.round(u[0], decimals=4)
    tensor([ 1., -1.])
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import (
    bias_correction,
    check_leaf,
    flatten_updates,
    fused_op_cannot_read,
    per_dtype,
    tensor_hyperparams,
    unflatten,
    zeros_like_params,
)
from diffopt.tree_math import safe_sqrt

__all__ = ["ScaleByAdanState", "scale_by_accelerated_adan", "scale_by_adan"]


class ScaleByAdanState(NamedTuple):
    """State of :func:`scale_by_adan`.

    Attributes:
        mu: exponential moving average of the updates.
        mu_diff: exponential moving average of the differences of consecutive updates.
        nu: exponential moving average of the squared Nesterov-corrected updates.
        prev: the previous step's updates (read from the second step on).
        count: number of updates made so far (an int64 0-d tensor).

    Example:
        >>> import torch
        >>> tx = scale_by_adan()
        >>> _, state = tx.update({'w': torch.tensor([2.0])}, tx.init({'w': torch.zeros(1)}))
        >>> state.mu['w'], state.prev['w'], int(state.count)
        (tensor([0.0400]), tensor([2.]), 1)
    """

    mu: object
    mu_diff: object
    nu: object
    prev: object
    count: torch.Tensor


def _check_hyper(name: str, b1: float, b2: float, b3: float, eps: float) -> None:
    for label, beta in (("b1", b1), ("b2", b2), ("b3", b3)):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"{name}: {label} must be in [0, 1), got {beta}")
    if not eps >= 0.0:
        raise ValueError(f"{name}: eps must be non-negative, got {eps}")


def _init_fn(name: str, moment_requires_grad: bool):
    def init_fn(params):
        def zeros():
            return zeros_like_params(name, params, requires_grad=moment_requires_grad)

        return ScaleByAdanState(mu=zeros(), mu_diff=zeros(), nu=zeros(), prev=zeros(),
                                count=torch.zeros((), dtype=torch.int64))

    return init_fn


def scale_by_adan(b1: float = 0.98, b2: float = 0.92, b3: float = 0.99, eps: float = 1e-8,
                  moment_requires_grad: bool = False) -> GradientTransformation:
    """Rescale updates by Adan's three moment estimates.

    Args:
        b1: decay of the first moment of the updates.
        b2: decay of the first moment of their differences (and the weight of the Nesterov
            correction).
        b3: decay of the second moment of the corrected updates.
        eps: added to the denominator outside the square root.
        moment_requires_grad: create the moments with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByAdanState`.

    Example:
        >>> import torch
        >>> scale_by_adan().init([torch.zeros(1)]).count
        tensor(0)
    """
    name = "scale_by_adan"
    _check_hyper(name, b1, b2, b3, eps)

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (mus, diffs, nus, prevs) = flatten_updates(
            name, updates, state.mu, state.mu_diff, state.nu, state.prev)
        count = state.count + 1
        # 0-d tensors, not Python floats: the count may be batched by vmap (one per model).
        bc1 = per_dtype(lambda dtype: bias_correction(b1, count, dtype))
        bc2 = per_dtype(lambda dtype: bias_correction(b2, count, dtype))
        bc3_sqrt = per_dtype(lambda dtype: bias_correction(b3, count, dtype).sqrt())
        has_prev = per_dtype(lambda dtype: (count > 1).to(dtype))  # no previous gradient at first
        out: list[list] = [[], [], [], [], []]
        for i, (g, m, v, n, prev) in enumerate(zip(grads, mus, diffs, nus, prevs)):
            if g is None:
                for lst, x in zip(out, (None, m, v, n, prev)):
                    lst.append(x)
                continue
            check_leaf(name, i, g, m)
            d = (g - prev) * has_prev(g.dtype)
            m = m * b1 + (1 - b1) * g
            v = v * b2 + (1 - b2) * d
            c = g + b2 * d
            n = n * b3 + (1 - b3) * c * c
            u = (m / bc1(m.dtype) + b2 * v / bc2(v.dtype)) / (safe_sqrt(n) / bc3_sqrt(n.dtype) + eps)
            for lst, x in zip(out, (u, m, v, n, g)):
                lst.append(x)
        new_updates, *new_state = (unflatten(treespec, lst) for lst in out)
        return new_updates, ScaleByAdanState(*new_state, count=count)

    return GradientTransformation(_init_fn(name, moment_requires_grad), update_fn)


def scale_by_accelerated_adan(b1: float = 0.98, b2: float = 0.92, b3: float = 0.99, eps: float = 1e-8,
                              moment_requires_grad: bool = False) -> GradientTransformation:
    """:func:`scale_by_adan` computed by fused-optim's fused, differentiable ``adan_update``.

    Same arguments, state and results as :func:`scale_by_adan` (up to rounding): one fused op per
    leaf list, with its hand-written backward. The op takes the step as a Python int, read from the
    (plain, unbatched) count; a count batched by ``torch.func.vmap`` runs :func:`scale_by_adan`'s
    math instead.

    Args:
        b1, b2, b3, eps, moment_requires_grad: as in :func:`scale_by_adan`.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByAdanState`.

    Raises:
        ImportError: at update time, when the ``fused-optim`` package is not installed.

    Example:
        >>> import torch
        >>> grads = {'w': torch.tensor([3.0, -0.5])}
        >>> fused, plain = scale_by_accelerated_adan(), scale_by_adan()
        >>> u_fused, _ = fused.update(grads, fused.init({'w': torch.zeros(2)}))
        >>> u_plain, _ = plain.update(grads, plain.init({'w': torch.zeros(2)}))
        >>> torch.round(u_fused['w'], decimals=4), bool(torch.allclose(u_fused['w'], u_plain['w']))
        (tensor([ 1., -1.]), True)
    """
    name = "scale_by_accelerated_adan"
    _check_hyper(name, b1, b2, b3, eps)
    plain = scale_by_adan(b1, b2, b3, eps, moment_requires_grad)
    if tensor_hyperparams(b1, b2, b3, eps):  # the fused op takes numbers
        return plain

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        from diffopt.accelerated_op import adan_direction

        if fused_op_cannot_read(state.count):
            return plain.update(updates, state)
        treespec, grads, states = flatten_updates(name, updates, state.mu, state.mu_diff, state.nu, state.prev)
        count = state.count + 1
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            check_leaf(name, i, grads[i], states[0][i])
        new_updates = [None] * len(grads)
        new_states = [list(s) for s in states]
        if present:
            directions, *outs = adan_direction(
                [grads[i] for i in present], *([s[i] for i in present] for s in states),
                int(count),  # a plain (unbatched) 0-d tensor
                beta1=b1, beta2=b2, beta3=b3, eps=eps)
            for j, i in enumerate(present):
                new_updates[i] = directions[j]
                for new, out in zip(new_states, outs):
                    new[i] = out[j]
        return unflatten(treespec, new_updates), ScaleByAdanState(
            *(unflatten(treespec, s) for s in new_states), count=count)

    return GradientTransformation(_init_fn(name, moment_requires_grad), update_fn)
