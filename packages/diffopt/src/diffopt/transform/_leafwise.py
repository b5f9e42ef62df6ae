"""Flattening shared by the transformations: one flatten per tree, one loop over the leaves.

Updates may hold ``None`` where a parameter got no gradient; such leaves stay ``None`` and their
state is carried over unchanged (torch.optim skips parameters without a gradient the same way).
"""

from __future__ import annotations

from typing import Any

import torch

import optree_core

__all__ = ["check_leaf", "flatten_updates", "unflatten", "zeros_like_params"]


def flatten_updates(name: str, updates: Any, *trees: Any) -> tuple[Any, list, list[list]]:
    """Flatten ``updates`` (``None`` kept as a leaf) and ``trees``, which must match it.

    Returns:
        ``(treespec, update_leaves, [leaves of each tree])``.

    Raises:
        ValueError: naming ``name`` when a tree's structure differs from the updates'.
    """
    leaves, treespec = optree_core.tree_flatten(updates, none_is_leaf=True)
    others = []
    for tree in trees:
        tree_leaves, tree_spec = optree_core.tree_flatten(tree, none_is_leaf=True)
        if tree_spec != treespec:
            raise ValueError(
                f"{name}: the updates and the optimizer state (or params) have different "
                f"structures: {treespec} vs {tree_spec}"
            )
        others.append(tree_leaves)
    return treespec, leaves, others


def unflatten(treespec: Any, leaves: list) -> Any:
    """Inverse of :func:`flatten_updates` for one list of leaves."""
    return optree_core.tree_unflatten(treespec, leaves)


def check_leaf(name: str, index: int, update: torch.Tensor, reference: torch.Tensor) -> None:
    """Raise a clear error when an update leaf does not fit the state leaf it pairs with."""
    if not isinstance(update, torch.Tensor):
        raise TypeError(f"{name}: update leaf {index} is a {type(update).__name__}, not a tensor")
    if update.dtype != reference.dtype:
        raise TypeError(
            f"{name}: update leaf {index} has dtype {update.dtype} but the optimizer state was "
            f"built for {reference.dtype}; cast the gradients or re-initialize the optimizer"
        )
    if update.shape != reference.shape:
        raise ValueError(
            f"{name}: update leaf {index} has shape {tuple(update.shape)} but the optimizer "
            f"state was built for shape {tuple(reference.shape)}"
        )


def zeros_like_params(name: str, params: Any, *, requires_grad: bool = False,
                      fill_value: float = 0.0) -> Any:
    """A tree of ``fill_value`` shaped like ``params``, checking every leaf is a float tensor."""

    def make(leaf: Any) -> torch.Tensor:
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"{name}: params must be a pytree of tensors, found "
                            f"{type(leaf).__name__}")
        if not (leaf.is_floating_point() or leaf.is_complex()):
            raise TypeError(f"{name}: params must be floating point tensors, found {leaf.dtype}")
        with torch.no_grad():
            out = torch.full_like(leaf, fill_value, memory_format=torch.preserve_format)
        return out.requires_grad_(requires_grad)

    return optree_core.tree_map(make, params)
