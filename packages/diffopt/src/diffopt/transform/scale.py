"""Scaling of updates by a constant or by a schedule of the step count.

Example:
    >>> import torch
    >>> tx = scale(0.5)
    >>> tx.update([torch.tensor(4.0)], tx.init([torch.tensor(0.0)]))[0]
    [tensor(2.)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

import optree_core
from diffopt.base import EmptyState, GradientTransformation
from diffopt.transform._leafwise import (
    ScalarTensors,
    flatten_updates,
    per_dtype,
    scale_leaves,
    unflatten,
)

__all__ = ["ScaleByScheduleState", "ScaleState", "scale", "scale_by_schedule"]

ScaleState = EmptyState
_EMPTY = ScaleState()  # immutable: every scale's init returns this one


class ScaleByScheduleState(NamedTuple):
    """State of :func:`scale_by_schedule`: the number of updates made so far (int64 tensor).

    Attributes:
        count: the step count passed to the schedule at the next update.

    Example:
        >>> import torch
        >>> tx = scale_by_schedule(lambda count: 1.0 / (1 + count))
        >>> state = tx.init([torch.zeros(1)])
        >>> u1, state = tx.update([torch.ones(1)], state)
        >>> u2, state = tx.update([torch.ones(1)], state)
        >>> u1, u2, state.count
        ([tensor([1.])], [tensor([0.5000])], tensor(2))
    """

    count: torch.Tensor


def _scale_leaves(updates: Any, factor: Any) -> Any:
    treespec, leaves, _ = flatten_updates("scale", updates)
    if not isinstance(factor, torch.Tensor):  # a number: one multi-tensor op where possible
        return unflatten(treespec, scale_leaves(leaves, factor))
    if factor.dim() == 0:
        # A 0-d factor (a schedule's value, a learned lr) takes each leaf's dtype: 0-d tensors
        # would otherwise promote each other (a float32 scalar parameter times a float64 rate).
        factor_as = per_dtype(factor.to)
        return unflatten(treespec, [None if g is None else g * factor_as(g.dtype) for g in leaves])
    return unflatten(treespec, [None if g is None else g * factor for g in leaves])


def scale(step_size: float | torch.Tensor) -> GradientTransformation:
    """Multiply the updates by ``step_size`` (a number or a tensor, which may require grad).

    Args:
        step_size: the factor.

    Returns:
        A stateless :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> lr = torch.tensor(0.1, requires_grad=True)
        >>> tx = scale(lr)
        >>> out, _ = tx.update([torch.tensor(2.0)], tx.init([torch.tensor(0.0)]))
        >>> out[0].requires_grad
        True
    """

    def init_fn(params):
        del params
        return _EMPTY

    if not (isinstance(step_size, (int, float)) and not isinstance(step_size, bool)):
        def update_by_tensor(updates, state, *, params=None, inplace=True):
            del params, inplace
            return _scale_leaves(updates, step_size), state

        return GradientTransformation(init_fn, update_by_tensor)

    factor = float(step_size)
    scalars = ScalarTensors(factor)
    flatten = optree_core.tree_flatten

    def scale_tree(updates):
        # The whole of ``sgd(lr)``'s update, run once per inner step of a MAML loop: one flatten,
        # one multi-tensor op where the leaves allow (with this factor's 0-d tensor made once),
        # one unflatten (the treespec's own method: no wrapper call; under torch.compile the twin
        # treespec's).
        leaves, treespec = flatten(updates, none_is_leaf=True)
        return treespec.unflatten(scale_leaves(leaves, factor, scalars=scalars))

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        return scale_tree(updates), state

    # A chain fuses this factor into a preceding transformation's ``scaled_update``, and a chain
    # of this one member calls ``scale_tree`` itself (its state is the chain's unchanged).
    update_fn.constant_factor = factor  # type: ignore[attr-defined]
    update_fn.stateless = scale_tree  # type: ignore[attr-defined]
    return GradientTransformation(init_fn, update_fn)


def scale_by_schedule(step_size_fn: Callable[[torch.Tensor], Any]) -> GradientTransformation:
    """Multiply the updates by ``step_size_fn(count)``, where count is the number of past updates.

    Args:
        step_size_fn: maps the step count (an int64 0-d tensor, starting at 0) to a factor.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByScheduleState`.

    Example:
        >>> import torch
        >>> tx = scale_by_schedule(lambda count: 1.0 / (1 + count))
        >>> state = tx.init([torch.tensor(0.0)])
        >>> _, state = tx.update([torch.tensor(1.0)], state)
        >>> tx.update([torch.tensor(1.0)], state)[0]
        [tensor(0.5000)]
    """
    if not callable(step_size_fn):
        raise TypeError("scale_by_schedule: step_size_fn must be callable")

    def init_fn(params):
        del params
        return ScaleByScheduleState(count=torch.zeros((), dtype=torch.int64))

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        factor = step_size_fn(state.count)
        return _scale_leaves(updates, factor), ScaleByScheduleState(count=state.count + 1)

    return GradientTransformation(init_fn, update_fn)
