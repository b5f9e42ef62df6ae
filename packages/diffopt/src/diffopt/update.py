"""Adding updates to parameters.

Example:
    >>> import torch
    >>> params = {'w': torch.tensor([1.0, 2.0])}
    >>> apply_updates(params, {'w': torch.tensor([0.5, -0.5])}, inplace=False)['w']
    tensor([1.5000, 1.5000])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import optree_core
from diffopt.transform import _leafwise
from diffopt.transform._leafwise import scale_leaves

__all__ = ["apply_updates"]  # add_leaves: the internal multi-tensor form it shares

# Bound once; results are rebuilt with the treespec's own ``unflatten`` (no wrapper call).
_flatten = optree_core.tree_flatten


def add_leaves(params: Sequence[Any], updates: Sequence[Any], alpha: float = 1.0) -> list:
    """``p + alpha * u`` for each pair (``p`` itself where ``u`` is ``None``), differentiably.

    One multi-tensor ``add`` for all the pairs where the leaves allow it (see
    :func:`diffopt.transform._leafwise.can_use_foreach`), one ``add`` per pair otherwise.

    Example:
        >>> import torch
        >>> add_leaves([torch.ones(2), torch.zeros(1)], [torch.ones(2), None])
        [tensor([2., 2.]), tensor([0.])]
    """
    # scale_leaves only iterates and indexes its lists (torch's foreach ops take tuples too), so a
    # caller's tuple or slice goes in as it is, without a copy.
    return scale_leaves(updates, alpha, params)  # type: ignore[arg-type]


def apply_updates(params: Any, updates: Any, *, inplace: bool = True) -> Any:
    """Return ``params + updates`` leaf-wise; ``None`` updates leave their parameter unchanged.

    Args:
        params: a pytree of tensors.
        updates: a pytree of tensors (or ``None``) with the same structure.
        inplace: add into the parameter tensors (without recording autograd history) and return
            ``params``; with ``False``, build new tensors, differentiably.

    Returns:
        The updated parameters, with ``params``' structure.

    Raises:
        ValueError: if the trees do not share one structure.
        TypeError: if an update's dtype or shape does not match its parameter.

    Example:
        >>> import torch
        >>> p = [torch.zeros(2)]
        >>> _ = apply_updates(p, [torch.ones(2)])
        >>> p[0]
        tensor([1., 1.])
    """
    param_leaves, treespec = _flatten(params, none_is_leaf=True)
    update_leaves, update_spec = _flatten(updates, none_is_leaf=True)
    if update_spec != treespec:
        raise ValueError(
            f"apply_updates: params and updates have different structures: "
            f"{treespec} vs {update_spec}"
        )
    if not inplace and _leafwise.pairs_fit(param_leaves, update_leaves):
        # The common functional case (every leaf a tensor, one dtype, no None, each pair of one
        # shape, all checked in one pass): one multi-tensor add, and no per-leaf checks to run
        # (they could not fail).
        return treespec.unflatten(torch._foreach_add(param_leaves, update_leaves))
    # Under torch.func (vmap has no batching rule for the foreach ops) each pair is added in the
    # pass that checks it, with no second pass over the leaves.
    per_pair = not inplace and torch._C._are_functorch_transforms_active()
    out = []
    for i, (p, u) in enumerate(zip(param_leaves, update_leaves)):
        if u is None or p is None:
            out.append(p)
            continue
        if not isinstance(u, torch.Tensor) or not isinstance(p, torch.Tensor):
            raise TypeError(f"apply_updates: leaf {i} is a {type(p).__name__} parameter with a "
                            f"{type(u).__name__} update; both must be tensors")
        if u.shape != p.shape:
            raise TypeError(f"apply_updates: update {i} has shape {tuple(u.shape)}, "
                            f"its parameter {tuple(p.shape)}")
        if u.dtype != p.dtype:
            raise TypeError(f"apply_updates: update {i} has dtype {u.dtype}, "
                            f"its parameter {p.dtype}")
        if per_pair:
            out.append(torch.add(p, u))
    if per_pair:
        return treespec.unflatten(out)
    if inplace:
        with torch.no_grad():
            for p, u in zip(param_leaves, update_leaves):
                if u is not None and p is not None:
                    p.add_(u)
        return params
    return treespec.unflatten(add_leaves(param_leaves, update_leaves))
