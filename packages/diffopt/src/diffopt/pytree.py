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

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed.rpc as rpc

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
    "tree_as_rref",
    "tree_div",
    "tree_flatten_as_tuple",
    "tree_local_value",
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
    "tree_to_here",
    "tree_truediv",
    "tree_vdot_real",
    "tree_wait",
]


def tree_flatten_as_tuple(
    tree: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[tuple[Any, ...], Any]:
    """Flatten ``tree`` into a tuple of leaves and its treespec.

    Args:
        tree: a pytree.
        is_leaf: a predicate that stops the flattening at the subtrees it accepts.
        none_is_leaf: count ``None`` as a leaf rather than as an empty node.
        namespace: the registry namespace of custom node types.

    Returns:
        ``(leaves, treespec)``: the leaves as a tuple (not a list) and the
        :class:`optree_core.PyTreeSpec` that rebuilds the tree from them.

    Example:
        >>> import torch
        >>> leaves, spec = tree_flatten_as_tuple({'b': torch.tensor(2.0), 'a': torch.tensor(1.0)})
        >>> leaves, spec.num_leaves
        ((tensor(1.), tensor(2.)), 2)
        >>> tree_flatten_as_tuple([None, 1], none_is_leaf=True)[0]
        (None, 1)
    """
    leaves, treespec = optree_core.tree_flatten(
        tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace
    )
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


# RPC helpers. TorchOpt defines them only where torch has RPC; here they always exist and say
# so clearly when it is missing.
_UNSET_RPC_TIMEOUT = rpc.api.UNSET_RPC_TIMEOUT if rpc.is_available() else -1.0


def _require_rpc(name: str) -> None:
    if not rpc.is_available():
        raise RuntimeError(f"{name}: this PyTorch build has no torch.distributed.rpc")


def tree_as_rref(tree: Any) -> Any:
    """Wrap every leaf of ``tree`` in a :class:`torch.distributed.rpc.RRef` owned by this worker.

    The RPC world must be initialized (``torch.distributed.rpc.init_rpc`` or
    :func:`diffopt.distributed.auto_init_rpc`).

    Args:
        tree: a pytree of local values.

    Returns:
        A pytree with the same structure whose leaves are ``RRef`` objects to those values.

    Example:
        >>> import torch
        >>> from diffopt.distributed import auto_init_rpc
        >>> @auto_init_rpc()
        ... def roundtrip():  # a world of one worker
        ...     rrefs = tree_as_rref({'w': torch.tensor(1.5), 'n': [2]})
        ...     return type(rrefs['w']).__name__, tree_to_here(rrefs), tree_local_value(rrefs)
        >>> roundtrip()
        ('RRef', {'w': tensor(1.5000), 'n': [2]}, {'w': tensor(1.5000), 'n': [2]})
    """
    _require_rpc("tree_as_rref")
    return optree_core.tree_map(rpc.RRef, tree)


def tree_to_here(rref_tree: Any, timeout: float = _UNSET_RPC_TIMEOUT) -> Any:
    """Fetch the value behind every :class:`~torch.distributed.rpc.RRef` leaf (``to_here``).

    Args:
        rref_tree: a pytree whose leaves are ``RRef`` objects, local or remote.
        timeout: seconds to wait for each value; the default is the RPC agent's timeout.

    Returns:
        A pytree with the same structure holding copies of the values.

    Example:
        >>> import torch
        >>> from diffopt.distributed import auto_init_rpc
        >>> @auto_init_rpc()
        ... def fetch():
        ...     return tree_to_here([tree_as_rref(torch.ones(2))], timeout=10.0)
        >>> fetch()
        [tensor([1., 1.])]
    """
    _require_rpc("tree_to_here")
    return optree_core.tree_map(lambda rref: rref.to_here(timeout=timeout), rref_tree)


def tree_local_value(rref_tree: Any) -> Any:
    """The values behind a tree of :class:`~torch.distributed.rpc.RRef` objects owned here.

    Args:
        rref_tree: a pytree whose leaves are ``RRef`` objects owned by this worker.

    Returns:
        A pytree with the same structure holding the values themselves (not copies).

    Raises:
        RuntimeError: from torch, if a leaf is owned by another worker.

    Example:
        >>> import torch
        >>> from diffopt.distributed import auto_init_rpc
        >>> @auto_init_rpc()
        ... def same_object():
        ...     value = torch.zeros(1)
        ...     return tree_local_value((tree_as_rref(value),))[0] is value
        >>> same_object()
        True
    """
    _require_rpc("tree_local_value")
    return optree_core.tree_map(lambda rref: rref.local_value(), rref_tree)
