"""``functools`` helpers that are pytrees.

    >>> import optree_core as optree
    >>> from optree_core.functools import partial
    >>> add = partial(lambda x, y, z=0: x + y + z, 1, z=100)
    >>> optree.tree_leaves(add)
    [1, 100]
    >>> doubled = optree.tree_map(lambda v: v * 2, add)
    >>> doubled(3)
    205
"""

from __future__ import annotations

import functools as _functools
from typing import Any

from optree_core.accessors import GetAttrEntry
from optree_core.ops import tree_reduce
from optree_core.registry import GLOBAL_NAMESPACE, register_pytree_node

__all__ = ["partial", "reduce"]

reduce = tree_reduce  # Reduces over the leaves of a tree.


class _PartialEntry(GetAttrEntry):
    """Children of a partial: its positional ``args`` and its ``keywords``."""

    __slots__ = ()

    def __call__(self, obj: Any) -> Any:
        return getattr(obj, self.entry)


class partial(_functools.partial):
    """A ``functools.partial`` whose bound arguments are pytree children (the function is
    metadata), so it can cross tree_map and jit-like transforms.

    Args:
        func: The function to call; it is metadata of the tree (never mapped over).
        *args: The positional arguments to bind; they are children of the tree.
        **keywords: The keyword arguments to bind; they are children of the tree.

    >>> import optree_core as optree
    >>> from optree_core.functools import partial
    >>> scale = partial(lambda factor, x: factor * x, 3)
    >>> optree.tree_leaves(scale), scale(2)
    ([3], 6)
    >>> optree.tree_map(lambda v: v + 1, scale)(2)
    8
    """

    __slots__ = ()

    def __new__(cls, func: Any, /, *args: Any, **keywords: Any) -> partial:
        if not callable(func):
            raise TypeError(f"the first argument must be callable, got {func!r}")
        # functools.partial merges a partial passed as `func` into one; a pytree partial keeps
        # it whole, so the inner one stays metadata and the structure stays predictable.
        self = super().__new__(cls, func)
        self.__setstate__((func, args, keywords, None))
        return self

    def __repr__(self) -> str:
        return "optree_core.functools." + super().__repr__()


def _flatten(p: partial) -> tuple[tuple[Any, Any], Any, tuple[str, str]]:
    return (p.args, dict(p.keywords)), p.func, ("args", "keywords")


def _unflatten(func: Any, children: tuple[Any, Any]) -> partial:
    args, keywords = children
    return partial(func, *args, **keywords)


register_pytree_node(partial, _flatten, _unflatten, path_entry_type=_PartialEntry,
                     namespace=GLOBAL_NAMESPACE)
