"""Weight decay added to the updates, optionally only where a mask says so.

Example:
    >>> import torch
    >>> tx = add_decayed_weights(0.1)
    >>> params = [torch.tensor([10.0])]
    >>> tx.update([torch.tensor([1.0])], tx.init(params), params=params)[0]
    [tensor([2.])]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optree_core
from diffopt.base import EmptyState, GradientTransformation
from diffopt.transform._leafwise import flatten_updates, unflatten

__all__ = ["AddDecayedWeightsState", "add_decayed_weights"]

AddDecayedWeightsState = EmptyState


def add_decayed_weights(
    weight_decay: float = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> GradientTransformation:
    """Add ``weight_decay * params`` to the updates.

    Args:
        weight_decay: the decay factor.
        mask: a pytree of booleans shaped like the params (or a function of the params returning
            one); decay is added only where it is ``True``.

    Returns:
        A stateless :class:`~diffopt.base.GradientTransformation`; its update needs ``params``.

    Example:
        >>> import torch
        >>> tx = add_decayed_weights(1.0, mask={'w': True, 'b': False})
        >>> params = {'w': torch.tensor(2.0), 'b': torch.tensor(3.0)}
        >>> grads = {'w': torch.tensor(0.0), 'b': torch.tensor(0.0)}
        >>> tx.update(grads, tx.init(params), params=params)[0]
        {'w': tensor(2.), 'b': tensor(0.)}
    """
    if not weight_decay >= 0.0:
        raise ValueError(f"add_decayed_weights: weight_decay must be non-negative, "
                         f"got {weight_decay}")

    def init_fn(params):
        del params
        return AddDecayedWeightsState()

    def update_fn(updates, state, *, params=None, inplace=True):
        del inplace
        if weight_decay == 0.0:
            return updates, state
        if params is None:
            raise ValueError("add_decayed_weights: params are required to add weight decay")
        treespec, grads, (leaves,) = flatten_updates("add_decayed_weights", updates, params)
        if mask is None:
            flags = [True] * len(grads)
        else:
            mask_tree = mask(params) if callable(mask) else mask
            flags = optree_core.tree_leaves(mask_tree, none_is_leaf=True)
            if len(flags) != len(grads):
                raise ValueError("add_decayed_weights: the mask does not match the params")
        out = [
            g if g is None or not flag else g + p * weight_decay
            for g, p, flag in zip(grads, leaves, flags)
        ]
        return unflatten(treespec, out), state

    return GradientTransformation(init_fn, update_fn)
