"""Pytree utilities: all of :mod:`optree_core`, plus torch-specific helpers and tree arithmetic.

``diffopt.pytree`` is what ``torchopt.pytree`` is for TorchOpt users: the optree API
(``tree_map``, ``tree_flatten``...) re-exported from :mod:`optree_core`, the leaf-wise arithmetic of
:mod:`diffopt.tree_math`, :func:`tree_ravel` and a few torch conveniences.

Example:
    >>> import torch
    >>> from diffopt import pytree
    >>> flat, unravel = pytree.tree_ravel({'a': torch.ones(2), 'b': torch.zeros(1)})
    >>> flat
    tensor([1., 1., 0.])
    >>> unravel(flat)['a']
    tensor([1., 1.])
"""

from __future__ import annotations

from typing import Any

import torch

import optree_core
from diffopt.tree_math import (
    tree_add,
    tree_add_scalar_mul,
    tree_div,
    tree_mul,
    tree_neg,
    tree_norm,
    tree_pos,
    tree_scalar_mul,
    tree_sub,
    tree_sub_scalar_mul,
    tree_sum,
    tree_truediv,
    tree_vdot_real,
)
from optree_core import *  # noqa: F403 (the whole optree API, by design)
from optree_core.integration.torch import tree_ravel

__all__ = [
    *optree_core.__all__,
    "tree_add",
    "tree_add_scalar_mul",
    "tree_div",
    "tree_flatten_as_tuple",
    "tree_matmul",
    "tree_mul",
    "tree_neg",
    "tree_norm",
    "tree_pos",
    "tree_ravel",
    "tree_scalar_mul",
    "tree_sub",
    "tree_sub_scalar_mul",
    "tree_sum",
    "tree_truediv",
    "tree_vdot_real",
    "tree_wait",
]


def tree_flatten_as_tuple(tree: Any) -> tuple[tuple[Any, ...], Any]:
    """Flatten ``tree`` into a tuple of leaves and its treespec.

    Args:
        tree: a pytree.

    Returns:
        ``(leaves, treespec)``: the leaves as a tuple (not a list) and the
        :class:`optree_core.PyTreeSpec` that rebuilds the tree from them.

    Example:
        >>> import torch
        >>> leaves, spec = tree_flatten_as_tuple({'b': torch.tensor(2.0), 'a': torch.tensor(1.0)})
        >>> leaves, spec.num_leaves
        ((tensor(1.), tensor(2.)), 2)
    """
    leaves, treespec = optree_core.tree_flatten(tree)
    return tuple(leaves), treespec


def tree_matmul(tree_x: Any, tree_y: Any) -> Any:
    """Leaf-wise matrix product ``x @ y``.

    Args:
        tree_x: a pytree of tensors.
        tree_y: a pytree with ``tree_x``'s structure whose leaves ``torch.matmul`` accepts with them.

    Returns:
        A pytree with ``tree_x``'s structure holding the products.

    Example:
        >>> import torch
        >>> tree_matmul({'a': 2 * torch.eye(2)}, {'a': torch.tensor([1.0, 3.0])})
        {'a': tensor([2., 6.])}
    """
    from diffopt.tree_math import tree_map_tensors

    return tree_map_tensors(torch.matmul, tree_x, tree_y)


def tree_wait(future_tree: Any) -> Any:
    """Wait for every :class:`torch.futures.Future` leaf and return a tree of their values.

    Args:
        future_tree: a pytree whose leaves are futures (e.g. from ``torch.distributed.rpc.rpc_async``).

    Returns:
        A pytree with the same structure holding each future's value.

    Example:
        >>> import torch
        >>> fut = torch.futures.Future()
        >>> fut.set_result(torch.tensor(1.0))
        >>> tree_wait({'x': fut, 'y': []})
        {'x': tensor(1.), 'y': []}
    """
    futures, treespec = optree_core.tree_flatten(future_tree)
    values = torch.futures.wait_all(futures) if futures else []
    return optree_core.tree_unflatten(treespec, values)
