r"""Momentum (heavy ball or Nesterov), with torch.optim.SGD's conventions.

.. math::
    b_1 = g_1, \quad b_t = \mu b_{t-1} + (1 - \tau) g_t, \qquad
    u_t = b_t \text{ (heavy ball)}, \quad u_t = g_t + \mu b_t \text{ (Nesterov)}

where :math:`\mu` is the momentum and :math:`\tau` the dampening (not applied on the first step,
as in PyTorch).

Example:
    >>> import torch
    >>> tx = trace(momentum=0.5)
    >>> state = tx.init([torch.zeros(1)])
    >>> u, state = tx.update([torch.tensor([1.0])], state)
    >>> tx.update([torch.tensor([1.0])], state)[0]
    [tensor([1.5000])]
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import (
    check_leaf,
    flatten_updates,
    per_dtype,
    unflatten,
    zeros_like_params,
)

__all__ = ["TraceState", "trace"]


class TraceState(NamedTuple):
    """State of :func:`trace`: the momentum buffers and the number of updates made.

    Attributes:
        trace: the momentum buffer of each parameter, ``momentum * trace + (1 - dampening) * g``.
        count: number of updates made so far (an int64 0-d tensor).

    Example:
        >>> import torch
        >>> tx = trace(momentum=0.5)
        >>> state = tx.init({'w': torch.zeros(1)})
        >>> for _ in range(2):
        ...     _, state = tx.update({'w': torch.tensor([2.0])}, state)
        >>> state.trace['w'], int(state.count)
        (tensor([3.]), 2)
    """

    trace: object
    count: torch.Tensor


def _select(condition: torch.Tensor, if_true: float, if_false, dtype: torch.dtype):
    """``if_true if condition else if_false`` as a 0-d ``dtype`` tensor (no Python read)."""
    if not isinstance(if_false, torch.Tensor):  # where() would make two numbers float32
        if_false = torch.scalar_tensor(if_false, dtype=dtype)
    return torch.where(condition, if_true, if_false).to(dtype)


def trace(momentum: float = 0.9, dampening: float = 0.0, nesterov: bool = False,
          moment_requires_grad: bool = False) -> GradientTransformation:
    """Accumulate updates into a momentum buffer (Polyak, 1964; Nesterov, 1983).

    Args:
        momentum: decay of the buffer.
        dampening: fraction of the new update left out of the buffer (after the first step).
        nesterov: use Nesterov momentum.
        moment_requires_grad: create the buffers with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`TraceState`.

    Example:
        >>> import torch
        >>> tx = trace(momentum=0.9, nesterov=True)
        >>> tx.update([torch.tensor([1.0])], tx.init([torch.zeros(1)]))[0]
        [tensor([1.9000])]
    """
    if not isinstance(momentum, torch.Tensor) and momentum < 0.0:
        raise ValueError(f"trace: momentum must be non-negative, got {momentum}")
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("trace: Nesterov momentum needs momentum > 0 and zero dampening")

    def init_fn(params):
        return TraceState(
            trace=zeros_like_params("trace", params, requires_grad=moment_requires_grad),
            count=torch.zeros((), dtype=torch.int64),
        )

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (buffers,) = flatten_updates("trace", updates, state.trace)
        # torch.optim.SGD starts the buffer as the gradient (no dampening on the first step).
        # The buffers start at zero, so without dampening ``momentum * 0 + g`` is exactly that:
        # one formula, nothing read from the count. Otherwise the coefficients are selected by
        # the count as tensors, so a count batched by vmap needs no Python branch either.
        if dampening or moment_requires_grad:
            first = state.count == 0
            decay = per_dtype(lambda dtype: _select(
                first, 1.0 if moment_requires_grad else 0.0, momentum, dtype))
            keep = per_dtype(lambda dtype: _select(first, 1.0, 1.0 - dampening, dtype))
        else:
            decay = keep = None
        new_updates, new_buffers = [], []
        for i, (g, b) in enumerate(zip(grads, buffers)):
            if g is None:
                new_updates.append(None)
                new_buffers.append(b)
                continue
            check_leaf("trace", i, g, b)
            if decay is None:
                b = b * momentum + g
            else:
                b = b * decay(b.dtype) + (g * keep(g.dtype) if dampening else g)
            new_updates.append(g + b * momentum if nesterov else b)
            new_buffers.append(b)
        new_state = TraceState(trace=unflatten(treespec, new_buffers), count=state.count + 1)
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(init_fn, update_fn)
