"""Tree operations: flatten, unflatten, map, reduce, transpose, broadcast.

Every function takes the keywords ``is_leaf`` (a predicate that stops the recursion),
``none_is_leaf`` (treat ``None`` as a leaf instead of an empty node) and ``namespace`` (which
custom registrations to use), like optree's.

    >>> import optree_core as optree
    >>> tree = {'b': (2, [3, 4]), 'a': 1, 'c': None}
    >>> leaves, spec = optree.tree_flatten(tree)
    >>> leaves
    [1, 2, 3, 4]
    >>> spec
    PyTreeSpec({'a': *, 'b': (*, [*, *]), 'c': None})
    >>> optree.tree_unflatten(spec, [10, 20, 30, 40])
    {'b': (20, [30, 40]), 'a': 10, 'c': None}
    >>> optree.tree_map(lambda x: x * 2, tree)
    {'b': (4, [6, 8]), 'a': 2, 'c': None}
"""

from __future__ import annotations

import functools
import operator
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from optree_core import _C
from optree_core._C import PyTreeKind, PyTreeSpec
from optree_core.accessors import ENTRY_CLASSES, KINDS, PyTreeAccessor
from optree_core.registry import DictMetaData
from optree_core.utils import total_order_sorted

__all__ = [
    "MAX_RECURSION_DEPTH",
    "NONE_IS_NODE",
    "NONE_IS_LEAF",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_flatten_with_accessor",
    "tree_unflatten",
    "tree_iter",
    "tree_leaves",
    "tree_structure",
    "tree_paths",
    "tree_accessors",
    "tree_is_leaf",
    "all_leaves",
    "tree_map",
    "tree_map_",
    "tree_map_with_path",
    "tree_map_with_path_",
    "tree_map_with_accessor",
    "tree_map_with_accessor_",
    "tree_replace_nones",
    "tree_partition",
    "tree_transpose",
    "tree_transpose_map",
    "tree_transpose_map_with_path",
    "tree_transpose_map_with_accessor",
    "tree_broadcast_prefix",
    "broadcast_prefix",
    "tree_broadcast_common",
    "broadcast_common",
    "tree_broadcast_map",
    "tree_broadcast_map_with_path",
    "tree_broadcast_map_with_accessor",
    "tree_reduce",
    "tree_sum",
    "tree_max",
    "tree_min",
    "tree_all",
    "tree_any",
    "tree_flatten_one_level",
    "prefix_errors",
    "treespec_paths",
    "treespec_accessors",
    "treespec_entries",
    "treespec_entry",
    "treespec_children",
    "treespec_child",
    "treespec_one_level",
    "treespec_transform",
    "treespec_is_leaf",
    "treespec_is_strict_leaf",
    "treespec_is_one_level",
    "treespec_is_prefix",
    "treespec_is_suffix",
    "treespec_leaf",
    "treespec_none",
    "treespec_tuple",
    "treespec_list",
    "treespec_dict",
    "treespec_frozendict",
    "treespec_namedtuple",
    "treespec_ordereddict",
    "treespec_defaultdict",
    "treespec_deque",
    "treespec_structseq",
    "treespec_from_collection",
]

MAX_RECURSION_DEPTH: int = _C.MAX_RECURSION_DEPTH
NONE_IS_NODE: bool = False
NONE_IS_LEAF: bool = True

# The dict types that flatten to mapping nodes (their children are matched by key).
STANDARD_DICT_TYPES: frozenset[type] = frozenset({dict, OrderedDict, defaultdict})

_MISSING: Any = object()


# --- flatten / unflatten ------------------------------------------------------------------


def tree_flatten(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[Any], PyTreeSpec]:
    """Flatten a tree into its leaves and its structure.

    Dict keys are sorted (the insertion order is remembered for unflattening); OrderedDicts
    keep their order. ``None`` is an empty node unless ``none_is_leaf``.

    Args:
        tree: The tree to flatten.
        is_leaf: Predicate called on every node; ``True`` makes the node a leaf.
        none_is_leaf: Whether ``None`` is a leaf.
        namespace: The namespace of custom registrations to use.

    Returns:
        ``(leaves, treespec)``.

        >>> tree_flatten({'b': [1, None], 'a': 2})
        ([2, 1], PyTreeSpec({'a': *, 'b': [*, None]}))
        >>> tree_flatten({'b': [1, None], 'a': 2}, none_is_leaf=True)
        ([2, 1, None], PyTreeSpec({'a': *, 'b': [*, *]}, NoneIsLeaf))
    """
    return _C.flatten(tree, is_leaf, none_is_leaf, namespace)


def tree_flatten_with_path(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[tuple[Any, ...]], list[Any], PyTreeSpec]:
    """Flatten a tree, also returning each leaf's path (a tuple of keys and indices).

    Args:
        tree: The tree to flatten.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

    Returns:
        ``(paths, leaves, treespec)``.

        >>> tree_flatten_with_path({'a': [1, 2], 'b': 3})
        ([('a', 0), ('a', 1), ('b',)], [1, 2, 3], PyTreeSpec({'a': [*, *], 'b': *}))
    """
    return _C.flatten_with_path(tree, is_leaf, none_is_leaf, namespace)


def tree_flatten_with_accessor(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[PyTreeAccessor], list[Any], PyTreeSpec]:
    """Flatten a tree, also returning each leaf's :class:`PyTreeAccessor`.

    Args:
        tree: The tree to flatten.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

    Returns:
        ``(accessors, leaves, treespec)``.

        >>> accessors, leaves, spec = tree_flatten_with_accessor({'a': (1, 2)})
        >>> [a.path for a in accessors], leaves
        ([('a', 0), ('a', 1)], [1, 2])
    """
    leaves, spec = _C.flatten(tree, is_leaf, none_is_leaf, namespace)
    return treespec_accessors(spec), leaves, spec


def tree_unflatten(treespec: PyTreeSpec, leaves: Iterable[Any]) -> Any:
    """Rebuild a tree of structure ``treespec`` from ``leaves``.

    Args:
        treespec: The structure of the tree to build.
        leaves: The leaves, in flatten order; exactly ``treespec.num_leaves`` of them.

    Raises:
        ValueError: if the number of leaves differs from ``treespec.num_leaves``.

        >>> spec = tree_structure((1, {'x': 2}))
        >>> tree_unflatten(spec, 'ab')
        ('a', {'x': 'b'})
    """
    if not isinstance(treespec, PyTreeSpec):
        raise TypeError(f"tree_unflatten(treespec, leaves): expected a PyTreeSpec as the first "
                        f"argument, got {treespec!r}.")
    return treespec.unflatten(leaves)


def tree_iter(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Iterator[Any]:
    """An iterator over the leaves of a tree, in flatten order.

    Args:
        tree: The tree whose leaves to iterate over.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

    The walk is lazy: a node is taken apart only when the iteration reaches it, so a leaf is
    found without flattening the rest of the tree, and the iterator may itself be stored in the
    part of the tree it has not reached yet (it is then one of the leaves).

        >>> list(tree_iter({'b': 2, 'a': (1, None)}))
        [1, 2]
    """
    return _iter_leaves(tree, is_leaf, none_is_leaf, namespace)


def _iter_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None, none_is_leaf: bool,
                 namespace: str) -> Iterator[Any]:
    # The dict order in effect when tree_iter was called holds for the whole walk, even if the
    # iteration goes on outside that dict_insertion_ordered context.
    insertion_ordered = _C.is_dict_insertion_ordered(namespace)
    return _LeafIterator(_walk_leaves(tree, is_leaf, none_is_leaf, namespace, insertion_ordered))


class _LeafIterator:
    """tree_iter's iterator: the lazy walk, refusing a next() made from inside its own step (by
    an is_leaf or flatten function) with RuntimeError, as optree does; a bare generator would
    raise ValueError there."""

    __slots__ = ("__weakref__", "_stepping", "_walk")

    def __init__(self, walk: Iterator[Any]) -> None:
        self._walk = walk
        self._stepping = False

    def __iter__(self) -> _LeafIterator:
        return self

    def __next__(self) -> Any:
        if self._stepping:
            raise RuntimeError("tree_iter: next() was called on the iterator while it was already "
                               "computing its next leaf (from an is_leaf or flatten function).")
        self._stepping = True
        try:
            return next(self._walk)
        finally:
            self._stepping = False


def _walk_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None, none_is_leaf: bool,
                 namespace: str, insertion_ordered: bool) -> Iterator[Any]:
    pending = [(tree, 0)]  # (node, depth), the next node to visit last
    while pending:
        node, depth = pending.pop()
        if _C.is_leaf(node, is_leaf, none_is_leaf, namespace):
            yield node
            continue
        if depth >= MAX_RECURSION_DEPTH:
            raise RecursionError(f"tree_iter: the tree is deeper than {MAX_RECURSION_DEPTH} "
                                 f"levels (is it cyclic?).")
        # is_leaf already said no: do not ask it again for this node.
        children, _, keys, kind, _ = _C.flatten_one_level(node, None, none_is_leaf, namespace)
        if (kind in (PyTreeKind.DICT, PyTreeKind.DEFAULTDICT)
                and _C.is_dict_insertion_ordered(namespace) != insertion_ordered):
            keys = list(node) if insertion_ordered else total_order_sorted(node)
            children = [node[key] for key in keys]
        pending.extend((child, depth + 1) for child in reversed(children))


def tree_leaves(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[Any]:
    """The leaves of a tree, in flatten order.

    Args:
        tree: The tree whose leaves to list.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_leaves([1, (2, None), {'c': 3}])
        [1, 2, 3]
    """
    return _C.flatten(tree, is_leaf, none_is_leaf, namespace)[0]


def tree_structure(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> PyTreeSpec:
    """The structure (treespec) of a tree.

    Args:
        tree: The tree whose structure to return.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_structure([1, (2, None)])
        PyTreeSpec([*, (*, None)])
    """
    return _C.flatten(tree, is_leaf, none_is_leaf, namespace)[1]


def tree_paths(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[tuple[Any, ...]]:
    """The path of each leaf of a tree.

    Args:
        tree: The tree whose leaf paths to list.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_paths({'a': [1, 2], 'b': 3})
        [('a', 0), ('a', 1), ('b',)]
    """
    return _C.flatten_with_path(tree, is_leaf, none_is_leaf, namespace)[0]


def tree_accessors(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[PyTreeAccessor]:
    """The :class:`PyTreeAccessor` of each leaf of a tree.

    Args:
        tree: The tree to work on.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> [a.codify('t') for a in tree_accessors({'a': [1, 2]})]
        ["t['a'][0]", "t['a'][1]"]
    """
    return treespec_accessors(tree_structure(tree, is_leaf, none_is_leaf=none_is_leaf,
                                             namespace=namespace))


def tree_is_leaf(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> bool:
    """Whether ``tree`` is a single leaf.

    Args:
        tree: The object to test.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_is_leaf(1), tree_is_leaf([1]), tree_is_leaf(None), tree_is_leaf(None, none_is_leaf=True)
        (True, False, False, True)
    """
    return _C.is_leaf(tree, is_leaf, none_is_leaf, namespace)


def all_leaves(
    iterable: Iterable[Any],
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> bool:
    """Whether every item of ``iterable`` is a leaf.

    Args:
        iterable: The objects to test, each on its own.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> all_leaves([1, 2.0, 'x']), all_leaves([1, [2]])
        (True, False)
    """
    return all(_C.is_leaf(x, is_leaf, none_is_leaf, namespace) for x in iterable)


# --- map ----------------------------------------------------------------------------------


def _flat_args(tree: Any, rests: tuple[Any, ...], is_leaf: Any, none_is_leaf: bool,
               namespace: str) -> tuple[list[Any], PyTreeSpec, list[list[Any]]]:
    leaves, spec = _C.flatten(tree, is_leaf, none_is_leaf, namespace)
    return leaves, spec, [spec.flatten_up_to(r) for r in rests]


def tree_map(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Apply ``func`` leaf-wise, keeping the structure of ``tree``.

    ``rests`` must have the structure of ``tree`` or contain it as a prefix (their subtrees at
    ``tree``'s leaves are passed whole).

    Args:
        func: Called on each leaf (with the matching leaves of ``rests`` as further arguments); its
            results are the leaves of the output.
        tree: The tree that sets the structure of the result.
        *rests: More trees, each with ``tree``'s structure as a prefix.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

    Raises:
        ValueError: naming the path where a tree in ``rests`` differs from ``tree``.

        >>> tree_map(lambda x, y: x + y, {'a': 1, 'b': (2, 3)}, {'a': 10, 'b': (20, 30)})
        {'a': 11, 'b': (22, 33)}
    """
    if not rests:
        return _C.map(func, tree, is_leaf, none_is_leaf, namespace)
    leaves, spec, others = _flat_args(tree, rests, is_leaf, none_is_leaf, namespace)
    return spec.unflatten(map(func, leaves, *others))


def tree_map_(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Like :func:`tree_map`, for side effects: calls ``func`` leaf-wise, returns ``tree``.

    Args:
        func: Called on each leaf (with the matching leaves of ``rests``); its results are
            discarded.
        tree: The tree to walk; it is returned unchanged.
        *rests: More trees, each with ``tree``'s structure as a prefix.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> seen = []
        >>> tree_map_(seen.append, [1, (2, 3)])
        [1, (2, 3)]
        >>> seen
        [1, 2, 3]
    """
    leaves, _, others = _flat_args(tree, rests, is_leaf, none_is_leaf, namespace)
    for _ in map(func, leaves, *others):
        pass
    return tree


def tree_map_with_path(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Like :func:`tree_map`, with each leaf's path as the first argument of ``func``.

    Args:
        func: Called as ``func(path, x, *ys)`` for each leaf ``x``; its results are the leaves of
            the output.
        tree: The tree that sets the structure of the result.
        *rests: More trees, each with ``tree``'s structure as a prefix.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_map_with_path(lambda p, x: (p, x), {'a': [7]})
        {'a': [(('a', 0), 7)]}
    """
    paths, leaves, spec = _C.flatten_with_path(tree, is_leaf, none_is_leaf, namespace)
    others = [spec.flatten_up_to(r) for r in rests]
    return spec.unflatten(map(func, paths, leaves, *others))


def tree_map_with_path_(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Like :func:`tree_map_with_path`, for side effects; returns ``tree``.

    Args:
        func: Called as ``func(path, x, *ys)`` for each leaf ``x``; its results are discarded.
        tree: The tree to walk; it is returned unchanged.
        *rests: More trees, each with ``tree``'s structure as a prefix.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> seen = []
        >>> tree_map_with_path_(lambda p, x: seen.append((p, x)), {'a': [7]})
        {'a': [7]}
        >>> seen
        [(('a', 0), 7)]
    """
    paths, leaves, spec = _C.flatten_with_path(tree, is_leaf, none_is_leaf, namespace)
    others = [spec.flatten_up_to(r) for r in rests]
    for _ in map(func, paths, leaves, *others):
        pass
    return tree


def tree_map_with_accessor(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Like :func:`tree_map`, with each leaf's :class:`PyTreeAccessor` as first argument.

    Args:
        func: Called as ``func(accessor, x, *ys)`` for each leaf ``x``; its results are the leaves
            of the output.
        tree: The tree that sets the structure of the result.
        *rests: More trees, each with ``tree``'s structure as a prefix.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_map_with_accessor(lambda a, x: a.codify('t'), {'k': [0]})
        {'k': ["t['k'][0]"]}
    """
    leaves, spec, others = _flat_args(tree, rests, is_leaf, none_is_leaf, namespace)
    return spec.unflatten(map(func, treespec_accessors(spec), leaves, *others))


def tree_map_with_accessor_(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Like :func:`tree_map_with_accessor`, for side effects; returns ``tree``.

    Args:
        func: Called as ``func(accessor, x, *ys)`` for each leaf ``x``; its results are discarded.
        tree: The tree to walk; it is returned unchanged.
        *rests: More trees, each with ``tree``'s structure as a prefix.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> seen = []
        >>> _ = tree_map_with_accessor_(lambda a, x: seen.append(a.path), [1, (2,)])
        >>> seen
        [(0,), (1, 0)]
    """
    leaves, spec, others = _flat_args(tree, rests, is_leaf, none_is_leaf, namespace)
    for _ in map(func, treespec_accessors(spec), leaves, *others):
        pass
    return tree


def tree_replace_nones(sentinel: Any, tree: Any, /, namespace: str = "") -> Any:
    """Replace every ``None`` in ``tree`` by ``sentinel``.

    Args:
        sentinel: The value put in place of each ``None``.
        tree: The tree to copy with its ``None`` nodes replaced.
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_replace_nones(0, {'a': None, 'b': [1, None]})
        {'a': 0, 'b': [1, 0]}
    """
    if tree is None:
        return sentinel
    return tree_map(lambda x: sentinel if x is None else x, tree, none_is_leaf=True,
                    namespace=namespace)


def tree_partition(
    predicate: Callable[[Any], bool],
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    fillvalue: Any = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[Any, Any]:
    """Split ``tree`` in two trees of the same structure: leaves where ``predicate`` holds, and
    the others; the missing places hold ``fillvalue``.

    Args:
        predicate: Called on each leaf; ``True`` puts the leaf in the first tree.
        tree: The tree to split.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        fillvalue: What fills the places a tree does not keep.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_partition(lambda x: x > 1, [1, 2, (3, 0)])
        ([None, 2, (3, None)], [1, None, (None, 0)])
    """
    leaves, spec = _C.flatten(tree, is_leaf, none_is_leaf, namespace)
    keep = [bool(predicate(x)) for x in leaves]
    return (spec.unflatten([x if k else fillvalue for x, k in zip(leaves, keep)]),
            spec.unflatten([fillvalue if k else x for x, k in zip(leaves, keep)]))


# --- transpose and broadcast ----------------------------------------------------------------


def tree_transpose(
    outer_treespec: PyTreeSpec,
    inner_treespec: PyTreeSpec,
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Turn a tree of structure ``outer(inner)`` into one of structure ``inner(outer)``.

    Args:
        outer_treespec: The structure of the outer levels of ``tree``.
        inner_treespec: The structure found at each leaf of ``outer_treespec``.
        tree: The tree to transpose, of structure ``outer(inner)``.
        is_leaf: Optional predicate marking the leaves of ``tree``, as in :func:`tree_flatten`.

        >>> outer = tree_structure([0, 0])
        >>> inner = tree_structure({'a': 0, 'b': 0})
        >>> tree_transpose(outer, inner, [{'a': 1, 'b': 2}, {'a': 3, 'b': 4}])
        {'a': [1, 3], 'b': [2, 4]}
    """
    if outer_treespec.none_is_leaf != inner_treespec.none_is_leaf:
        raise ValueError("Tree structures must have the same none_is_leaf value.")
    if outer_treespec.namespace and inner_treespec.namespace and (
            outer_treespec.namespace != inner_treespec.namespace):
        raise ValueError(f"Tree structures must have the same namespace (or none); got "
                         f"{outer_treespec.namespace!r} and {inner_treespec.namespace!r}.")
    outer_size, inner_size = outer_treespec.num_leaves, inner_treespec.num_leaves
    if outer_size == 0 or inner_size == 0:
        raise ValueError("Tree structures must have at least one leaf; got "
                         f"{outer_treespec} and {inner_treespec}.")
    if (outer_treespec.namespace and inner_treespec.namespace
            and outer_treespec.namespace != inner_treespec.namespace):
        raise ValueError(f"Tree structures must have the same namespace to be transposed, got "
                         f"{outer_treespec.namespace!r} and {inner_treespec.namespace!r}.")
    namespace = outer_treespec.namespace or inner_treespec.namespace
    grid = _transpose_grid(outer_treespec, inner_size, tree, is_leaf, namespace)
    if grid is None:
        raise TypeError(_transpose_mismatch(outer_treespec, inner_treespec, tree, is_leaf,
                                            namespace))
    subtrees = [outer_treespec.unflatten(column) for column in zip(*grid)]
    return inner_treespec.unflatten(subtrees)


def _transpose_grid(outer_treespec: PyTreeSpec, inner_size: int, tree: Any,
                    is_leaf: Callable[[Any], bool] | None,
                    namespace: str) -> list[list[Any]] | None:
    """The leaves of ``tree``, inner_size per outer leaf, or None if they do not divide so.

    Subtrees are matched to the outer spec by key (flatten_up_to), and their containers may
    differ from the inner spec (a tuple where it has a list). Where the outer part itself differs
    (a custom node whose metadata changed when its leaves became subtrees), optree only checks
    the leaf count and takes them in order; so does this, as a fallback.
    """
    none_is_leaf = outer_treespec.none_is_leaf
    try:
        subtrees = outer_treespec.flatten_up_to(tree)
    except ValueError:
        leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
        if len(leaves) != outer_treespec.num_leaves * inner_size:
            return None
        return [leaves[start:start + inner_size] for start in range(0, len(leaves), inner_size)]
    grid = [tree_leaves(subtree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
            for subtree in subtrees]
    return grid if all(len(leaves) == inner_size for leaves in grid) else None


def _transpose_mismatch(outer_treespec: PyTreeSpec, inner_treespec: PyTreeSpec, tree: Any,
                        is_leaf: Callable[[Any], bool] | None, namespace: str) -> str:
    """Says where ``tree`` departs from ``outer_treespec.compose(inner_treespec)``."""
    # Composing first refuses specs whose namespaces cannot merge (ValueError), as optree does.
    outer_treespec.compose(inner_treespec)
    num_leaves = len(tree_leaves(tree, is_leaf, none_is_leaf=outer_treespec.none_is_leaf,
                                 namespace=namespace))
    summary = (f"Tree structure mismatch: expected {outer_treespec.num_leaves} x "
               f"{inner_treespec.num_leaves} leaves ({outer_treespec} of {inner_treespec}), got "
               f"{num_leaves}")
    try:
        subtrees = outer_treespec.flatten_up_to(tree)
    except ValueError as exc:
        return f"{summary}: {exc}"
    for path, subtree in zip(outer_treespec.paths(), subtrees):
        count = len(tree_leaves(subtree, is_leaf, none_is_leaf=outer_treespec.none_is_leaf,
                                namespace=namespace))
        if count != inner_treespec.num_leaves:
            return f"{summary}: the subtree at outer path {path!r} has {count}: {subtree!r}."
    return f"{summary}."


def tree_transpose_map(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    inner_treespec: PyTreeSpec | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Map ``func`` (which returns trees of structure ``inner_treespec``) and transpose, so the
    result is ``inner(outer)``.

    Args:
        func: Called on each leaf (with the matching leaves of ``rests``); returns a tree of
            structure ``inner_treespec``.
        tree: The tree that sets the outer structure.
        *rests: More trees, each with ``tree``'s structure as a prefix.
        inner_treespec: The structure of ``func``'s results (by default that of its first result).
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_transpose_map(lambda x: {'id': x, 'sq': x * x}, [1, 2])
        {'id': [1, 2], 'sq': [1, 4]}
    """
    leaves, outer, others = _flat_args(tree, rests, is_leaf, none_is_leaf, namespace)
    return _transpose_results(outer, list(map(func, leaves, *others)), inner_treespec, is_leaf,
                              none_is_leaf, namespace)


def _transpose_results(outer: PyTreeSpec, results: list[Any], inner_treespec: PyTreeSpec | None,
                       is_leaf: Any, none_is_leaf: bool, namespace: str) -> Any:
    """``inner(outer)`` from one result per leaf of ``outer``, each ``inner_treespec`` at its top
    (its subtrees below the inner leaves move whole)."""
    if inner_treespec is None:
        if not results:
            raise ValueError(f"The outer structure must have at least one leaf to infer the inner "
                             f"one from; got {outer}.")
        inner_treespec = tree_structure(results[0], is_leaf, none_is_leaf=none_is_leaf,
                                        namespace=namespace)
    if inner_treespec.num_leaves == 0:
        raise ValueError(f"The inner structure must have at least one leaf; got {inner_treespec}.")
    columns = [inner_treespec.flatten_up_to(result) for result in results]
    rows = zip(*columns) if columns else [()] * inner_treespec.num_leaves
    return inner_treespec.unflatten([outer.unflatten(list(row)) for row in rows])


def tree_transpose_map_with_path(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    inner_treespec: PyTreeSpec | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_transpose_map` with each leaf's path as the first argument of ``func``.

    Args:
        func: Called as ``func(path, x, *ys)`` for each leaf ``x``; returns a tree of structure
            ``inner_treespec``.
        tree: The tree that sets the outer structure.
        *rests: More trees, each with ``tree``'s structure as a prefix.
        inner_treespec: The structure of ``func``'s results (by default that of its first result).
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_transpose_map_with_path(lambda p, x: {'at': p[0], 'x': x}, [5, 6])
        {'at': [0, 1], 'x': [5, 6]}
    """
    paths, leaves, outer = _C.flatten_with_path(tree, is_leaf, none_is_leaf, namespace)
    others = [outer.flatten_up_to(r) for r in rests]
    return _transpose_results(outer, list(map(func, paths, leaves, *others)), inner_treespec,
                              is_leaf, none_is_leaf, namespace)


def tree_transpose_map_with_accessor(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    inner_treespec: PyTreeSpec | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_transpose_map` with each leaf's :class:`PyTreeAccessor` as the first argument.

    Args:
        func: Called as ``func(accessor, x, *ys)`` for each leaf ``x``; returns a tree of structure
            ``inner_treespec``.
        tree: The tree that sets the outer structure.
        *rests: More trees, each with ``tree``'s structure as a prefix.
        inner_treespec: The structure of ``func``'s results (by default that of its first result).
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_transpose_map_with_accessor(lambda a, x: {'at': a.codify('t'), 'x': x}, {'k': [5]})
        {'at': {'k': ["t['k'][0]"]}, 'x': {'k': [5]}}
    """
    leaves, outer, others = _flat_args(tree, rests, is_leaf, none_is_leaf, namespace)
    results = list(map(func, treespec_accessors(outer), leaves, *others))
    return _transpose_results(outer, results, inner_treespec, is_leaf, none_is_leaf, namespace)


def tree_broadcast_prefix(
    prefix_tree: Any,
    full_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Repeat each leaf of ``prefix_tree`` over the matching subtree of ``full_tree``.

    Args:
        prefix_tree: The tree whose leaves are repeated; its structure must be a prefix of
            ``full_tree``'s.
        full_tree: The tree whose structure the result takes.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

    Raises:
        ValueError: if ``prefix_tree`` is not a prefix of ``full_tree``, naming the path.

        >>> tree_broadcast_prefix([1, 2], [(0, 0), {'a': 0}])
        [(1, 1), {'a': 2}]
    """
    prefix_spec = tree_structure(prefix_tree, is_leaf, none_is_leaf=none_is_leaf,
                                 namespace=namespace)
    subtrees = prefix_spec.flatten_up_to(full_tree)
    prefix_leaves = prefix_spec.flatten_up_to(prefix_tree)
    out = []
    for value, sub in zip(prefix_leaves, subtrees):
        sub_spec = tree_structure(sub, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
        out.append(sub_spec.unflatten([value] * sub_spec.num_leaves))
    return prefix_spec.unflatten(out)


def broadcast_prefix(
    prefix_tree: Any,
    full_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[Any]:
    """The leaves of :func:`tree_broadcast_prefix`.

    Args:
        prefix_tree: The tree whose leaves are repeated; its structure must be a prefix of
            ``full_tree``'s.
        full_tree: The tree whose structure the result takes.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> broadcast_prefix([1, 2], [(0, 0), {'a': 0}])
        [1, 1, 2]
    """
    return tree_leaves(tree_broadcast_prefix(prefix_tree, full_tree, is_leaf,
                                             none_is_leaf=none_is_leaf, namespace=namespace),
                       is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_broadcast_common(
    tree: Any,
    other_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[Any, Any]:
    """Broadcast two trees to their common suffix structure.

    Args:
        tree: The first tree.
        other_tree: The second tree.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_broadcast_common([1, (2, 3)], [(4, 5), 6])
        ([(1, 1), (2, 3)], [(4, 5), (6, 6)])
    """
    spec = tree_structure(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    other_spec = tree_structure(other_tree, is_leaf, none_is_leaf=none_is_leaf,
                                namespace=namespace)
    common = spec.broadcast_to_common_suffix(other_spec)
    return (_broadcast_to(tree, common, is_leaf, none_is_leaf, namespace),
            _broadcast_to(other_tree, common, is_leaf, none_is_leaf, namespace))


def _broadcast_to(tree: Any, common: PyTreeSpec, is_leaf: Any, none_is_leaf: bool,
                  namespace: str) -> Any:
    return common.unflatten(_expand(tree, common, is_leaf, none_is_leaf, namespace))


_DICT_KINDS = (PyTreeKind.DICT, PyTreeKind.ORDEREDDICT, PyTreeKind.DEFAULTDICT)


def _expand(tree: Any, common: PyTreeSpec, is_leaf: Any, none_is_leaf: bool,
            namespace: str) -> list[Any]:
    """The leaves of ``tree`` repeated over ``common`` (a structure ``tree`` is a prefix of),
    in ``common``'s leaf order: dict-like children are matched by key."""
    if common.is_leaf() or _C.is_leaf(tree, is_leaf, none_is_leaf, namespace):
        return [tree] * common.num_leaves
    children, _, entries, kind, _ = _C.flatten_one_level(tree, is_leaf, none_is_leaf, namespace)
    if kind in _DICT_KINDS:
        by_entry = dict(zip(entries, children))
        children = [by_entry[entry] for entry in common.entries()]
    out: list[Any] = []
    for child, sub in zip(children, common.children()):
        out.extend(_expand(child, sub, is_leaf, none_is_leaf, namespace))
    return out


def broadcast_common(
    tree: Any,
    other_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[Any], list[Any]]:
    """The leaves of :func:`tree_broadcast_common`.

    Args:
        tree: The first tree.
        other_tree: The second tree.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> broadcast_common([1, (2, 3)], [(4, 5), 6])
        ([1, 1, 2, 3], [4, 5, 6, 6])
    """
    a, b = tree_broadcast_common(tree, other_tree, is_leaf, none_is_leaf=none_is_leaf,
                                 namespace=namespace)
    return (tree_leaves(a, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace),
            tree_leaves(b, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace))


def _broadcast_all(trees: tuple[Any, ...], is_leaf: Any, none_is_leaf: bool,
                   namespace: str) -> tuple[PyTreeSpec, list[list[Any]]]:
    if len(trees) == 1:  # nothing to broadcast: flatten once (a custom flatten may be one-shot)
        leaves, spec = tree_flatten(trees[0], is_leaf, none_is_leaf=none_is_leaf,
                                    namespace=namespace)
        return spec, [leaves]
    specs = [tree_structure(t, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
             for t in trees]
    common = specs[0]
    for s in specs[1:]:
        common = common.broadcast_to_common_suffix(s)
    return common, [_expand(t, common, is_leaf, none_is_leaf, namespace) for t in trees]


def tree_broadcast_map(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_map` over trees broadcast to their common suffix structure.

    Args:
        func: Called leaf-wise on the broadcast trees; its results are the leaves of the output.
        tree: The first tree; ``rests`` are broadcast with it.
        *rests: More trees, broadcast with ``tree`` to a common structure.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_broadcast_map(lambda x, y: x * y, [1, 2], [(3, 4), 5])
        [(3, 4), 10]
    """
    common, flat = _broadcast_all((tree, *rests), is_leaf, none_is_leaf, namespace)
    return common.unflatten(map(func, *flat))


def tree_broadcast_map_with_path(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_broadcast_map` with each leaf's path (in the common structure) first.

    Args:
        func: Called as ``func(path, x, *ys)`` on the leaves of the broadcast trees.
        tree: The first tree; ``rests`` are broadcast with it.
        *rests: More trees, broadcast with ``tree`` to a common structure.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_broadcast_map_with_path(lambda p, x, y: (p, x + y), [1, 2], [(10, 20), 30])
        [(((0, 0), 11), ((0, 1), 21)), ((1,), 32)]
    """
    common, flat = _broadcast_all((tree, *rests), is_leaf, none_is_leaf, namespace)
    return common.unflatten(map(func, common.paths(), *flat))


def tree_broadcast_map_with_accessor(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """:func:`tree_broadcast_map` with each leaf's :class:`PyTreeAccessor` (in the common
    structure) as the first argument of ``func``.

    Args:
        func: Called as ``func(accessor, x, *ys)`` on the leaves of the broadcast trees.
        tree: The first tree; ``rests`` are broadcast with it.
        *rests: More trees, broadcast with ``tree`` to a common structure.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_broadcast_map_with_accessor(lambda a, x, y: (a.path, x * y), [1, 2], [(3, 4), 5])
        [(((0, 0), 3), ((0, 1), 4)), ((1,), 10)]
    """
    common, flat = _broadcast_all((tree, *rests), is_leaf, none_is_leaf, namespace)
    return common.unflatten(map(func, treespec_accessors(common), *flat))


# --- reductions ---------------------------------------------------------------------------


def tree_reduce(
    func: Callable[[Any, Any], Any],
    tree: Any,
    /,
    initial: Any = _MISSING,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``functools.reduce`` over the leaves of a tree.

    Args:
        func: Two-argument function folding the leaves from left to right.
        tree: The tree whose leaves to fold.
        initial: Optional first value of the fold (without it, a tree with no leaves raises
            ``TypeError``).
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_reduce(lambda a, b: a * b, [2, (3, 4)])
        24
    """
    leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if initial is _MISSING:
        return functools.reduce(func, leaves)
    return functools.reduce(func, leaves, initial)


def tree_sum(
    tree: Any,
    /,
    start: Any = 0,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """The sum of the leaves (plus ``start``).

    Args:
        tree: The tree whose leaves to add.
        start: The value the leaves are added to.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_sum({'a': 1, 'b': [2, 3]})
        6
    """
    # reduce with +, not sum(): sum() refuses str leaves, which `+` joins.
    return functools.reduce(operator.add,
                            tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf,
                                        namespace=namespace),
                            start)


def _extreme(pick: Callable[..., Any], name: str, tree: Any, default: Any, key: Any, is_leaf: Any,
             none_is_leaf: bool, namespace: str) -> Any:
    """``pick`` (the builtin max or min) over the leaves, with builtins' ``default`` semantics."""
    leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if default is _MISSING:
        if not leaves:
            raise ValueError(f"{name}() arg is an empty pytree: {tree!r}.")
        return pick(leaves, key=key)
    return pick(leaves, default=default, key=key)


def tree_max(
    tree: Any,
    /,
    *,
    default: Any = _MISSING,
    key: Callable[[Any], Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """The largest leaf (``default`` for a tree without leaves).

    Args:
        tree: The tree to work on.
        default: Returned when the tree has no leaves (without it, such a tree raises
            ``ValueError``).
        key: Optional one-argument function the leaves are compared by, as for the builtin ``max``.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_max([1, (5, 2)])
        5
    """
    return _extreme(max, "tree_max", tree, default, key, is_leaf, none_is_leaf, namespace)


def tree_min(
    tree: Any,
    /,
    *,
    default: Any = _MISSING,
    key: Callable[[Any], Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """The smallest leaf (``default`` for a tree without leaves).

    Args:
        tree: The tree to work on.
        default: Returned when the tree has no leaves (without it, such a tree raises
            ``ValueError``).
        key: Optional one-argument function the leaves are compared by, as for the builtin ``min``.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_min([4, (5, 2)])
        2
    """
    return _extreme(min, "tree_min", tree, default, key, is_leaf, none_is_leaf, namespace)


def tree_all(
    tree: Any,
    /,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> bool:
    """Whether every leaf is truthy.

    Args:
        tree: The tree to work on.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_all([1, (True, 'x')]), tree_all([1, 0])
        (True, False)
    """
    return all(tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace))


def tree_any(
    tree: Any,
    /,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> bool:
    """Whether any leaf is truthy.

    Args:
        tree: The tree to work on.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> tree_any([0, (False, '')]), tree_any([0, 1])
        (False, True)
    """
    return any(tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace))


# --- one level ----------------------------------------------------------------------------


class FlattenOneLevelOutput(NamedTuple):
    """The outermost node of a tree, taken apart: what unpacks as four values."""

    children: list[Any]
    metadata: Any
    entries: tuple[Any, ...]
    unflatten_func: Callable[[Any, Iterable[Any]], Any]


class FlattenOneLevelOutputEx(FlattenOneLevelOutput):
    """:class:`FlattenOneLevelOutput` that also says what the node was: ``type``, ``kind`` and
    ``path_entry_type`` (the entry class of its children's paths), as attributes."""

    type: type
    kind: PyTreeKind
    path_entry_type: type


def _unflatten_none(metadata: Any, children: Iterable[Any]) -> None:
    if any(True for _ in children):
        raise ValueError("None has no children, but some were given to rebuild it.")


def _builtin_unflatten(kind: PyTreeKind, node_type: type) -> Callable[[Any, Iterable[Any]], Any]:
    if kind == PyTreeKind.NONE:
        return _unflatten_none
    if kind == PyTreeKind.TUPLE:
        return lambda metadata, children: tuple(children)
    if kind == PyTreeKind.LIST:
        return lambda metadata, children: list(children)
    if kind in (PyTreeKind.DICT, PyTreeKind.ORDEREDDICT):
        ctor = dict if kind == PyTreeKind.DICT else OrderedDict
        return lambda keys, children: ctor(_in_original_order(keys, children))
    if kind == PyTreeKind.DEFAULTDICT:
        return lambda metadata, children: defaultdict(metadata[0],
                                                      _in_original_order(metadata[1], children))
    if kind == PyTreeKind.DEQUE:
        return lambda maxlen, children: deque(children, maxlen=maxlen)
    if kind == PyTreeKind.NAMEDTUPLE:
        return lambda cls, children: cls(*children)
    if kind == PyTreeKind.STRUCTSEQUENCE:
        return lambda cls, children: cls(tuple(children))
    raise ValueError(f"No unflatten function for node kind {kind!r}.")


def _in_original_order(keys: Any, children: Iterable[Any]) -> list[tuple[Any, Any]]:
    """The (key, child) pairs of a dict node, in the dict's own key order when ``keys`` is a
    DictMetaData (a plain key list is taken as it is)."""
    values = dict(zip(keys, children))
    return [(k, values[k]) for k in getattr(keys, "original_keys", keys)]


def tree_flatten_one_level(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> FlattenOneLevelOutputEx:
    """Take apart the outermost node of ``tree``.

    Args:
        tree: The node to take apart (not a leaf).
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

    Returns:
        ``(children, metadata, entries, unflatten_func)`` with
        ``unflatten_func(metadata, children)`` rebuilding the node.

    Raises:
        ValueError: if ``tree`` is a leaf.

        >>> children, metadata, entries, unflatten = tree_flatten_one_level({'b': 2, 'a': [1]})
        >>> children, metadata, entries
        ([[1], 2], ['a', 'b'], ('a', 'b'))
        >>> unflatten(metadata, children)  # the dict's own key order is kept
        {'b': 2, 'a': [1]}
    """
    children, metadata, entries, kind, node_type = _C.flatten_one_level(
        tree, is_leaf, none_is_leaf, namespace)
    if kind == PyTreeKind.CUSTOM:
        found = _C.lookup_node(node_type, namespace)
        unflatten_func, path_entry_type = found[2], found[3]
    else:
        unflatten_func, path_entry_type = _builtin_unflatten(kind, node_type), ENTRY_CLASSES[kind]
    # Dict keys come in traversal order (sorted unless insertion-ordered); the metadata also
    # carries the dict's own order, which unflatten_func restores.
    if kind == PyTreeKind.DICT:
        metadata = DictMetaData(metadata, original_keys=list(tree))
    elif kind == PyTreeKind.DEFAULTDICT:
        metadata = (metadata[0], DictMetaData(metadata[1], original_keys=list(tree)))
    output = FlattenOneLevelOutputEx(children, metadata, entries, unflatten_func)
    output.type, output.kind, output.path_entry_type = node_type, kind, path_entry_type
    return output


def prefix_errors(
    prefix_tree: Any,
    full_tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[Callable[[str], ValueError]]:
    """Why ``prefix_tree`` is not a prefix of ``full_tree``: one error factory per mismatch,
    each taking the name of the tree to mention (empty when it is a prefix).

    Args:
        prefix_tree: The tree whose structure must be a prefix of ``full_tree``'s.
        full_tree: The tree whose structure is the target.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (``True``) or an empty node (``False``, the
            default).
        namespace: The namespace whose custom node registrations apply ('' for the global ones
            only).

        >>> prefix_errors([1, 2], [3, (4, 5)])
        []
        >>> [error] = prefix_errors([1, (2, 3)], [3, (4, 5, 6)])
        >>> print(error('x'))  # doctest: +ELLIPSIS
        pytree structure error: different numbers of pytree children at key path
            x tree at key path (1,)
        ...
    """
    errors: list[Callable[[str], ValueError]] = []
    _collect_prefix_errors(prefix_tree, full_tree, (), is_leaf, none_is_leaf, namespace, errors)
    return errors


def _collect_prefix_errors(prefix: Any, full: Any, path: tuple[Any, ...], is_leaf: Any,
                           none_is_leaf: bool, namespace: str,
                           errors: list[Callable[[str], ValueError]]) -> None:
    if _C.is_leaf(prefix, is_leaf, none_is_leaf, namespace):
        return
    kind_p = _C.flatten_one_level(prefix, is_leaf, none_is_leaf, namespace)
    both_dicts = isinstance(prefix, dict) and isinstance(full, dict)
    if _C.is_leaf(full, is_leaf, none_is_leaf, namespace) or (
            type(prefix) is not type(full) and not both_dicts):
        errors.append(lambda name, p=path: ValueError(
            f"pytree structure error: different types at key path\n    {name} tree at key path "
            f"{p!r}\nAt that key path, the prefix pytree {name} has a subtree of type\n    "
            f"{type(prefix).__name__}\nbut at the same key path the full pytree has a subtree of "
            f"different type\n    {type(full).__name__}."))
        return
    kind_f = _C.flatten_one_level(full, is_leaf, none_is_leaf, namespace)
    children_p, meta_p, entries_p = kind_p[0], kind_p[1], kind_p[2]
    children_f, meta_f, entries_f = kind_f[0], kind_f[1], kind_f[2]
    if kind_p[3] in _DICT_KINDS and kind_f[3] in _DICT_KINDS:
        # dict, OrderedDict and defaultdict match one another by key, as in tree_map.
        if set(entries_p) != set(entries_f):
            errors.append(lambda name, p=path: ValueError(
                f"pytree structure error: different pytree keys at key path\n    {name} tree at "
                f"key path {p!r}\nAt that key path, the prefix pytree {name} has a mapping with "
                f"keys\n    {sorted(map(repr, entries_p))}\nbut the full pytree has keys\n    "
                f"{sorted(map(repr, entries_f))}."))
            return
        by_key = dict(zip(entries_f, children_f))
        for entry, child_p in zip(entries_p, children_p):
            _collect_prefix_errors(child_p, by_key[entry], (*path, entry), is_leaf,
                                   none_is_leaf, namespace, errors)
        return
    if len(children_p) != len(children_f):
        errors.append(lambda name, p=path: ValueError(
            f"pytree structure error: different numbers of pytree children at key path\n    "
            f"{name} tree at key path {p!r}\nAt that key path, the prefix pytree {name} has a "
            f"subtree of type\n    {type(prefix).__name__}\nwith {len(children_p)} children, but "
            f"at the same key path the full pytree has a subtree of the same type but with "
            f"{len(children_f)} children."))
        return
    deques = kind_p[3] == kind_f[3] == PyTreeKind.DEQUE  # maxlen does not matter, as in tree_map
    if not deques and meta_p != meta_f and not (
            isinstance(meta_p, list) and isinstance(meta_f, list) and set(meta_p) == set(meta_f)):
        errors.append(lambda name, p=path: ValueError(
            f"pytree structure error: different pytree metadata at key path\n    {name} tree at "
            f"key path {p!r}\nAt that key path, the prefix pytree {name} has a subtree of type\n"
            f"    {type(prefix).__name__}\nwith metadata\n    {meta_p!r}\nbut at the same key path "
            f"the full pytree has a subtree of the same type but with metadata\n    {meta_f!r}."))
        return
    for entry, child_p, child_f in zip(entries_p, children_p, children_f):
        _collect_prefix_errors(child_p, child_f, (*path, entry), is_leaf, none_is_leaf,
                               namespace, errors)


# --- treespec functions -------------------------------------------------------------------


def _treespec_from_state(state: tuple[Any, ...]) -> PyTreeSpec:
    """Unpickle a treespec (a plain function, so every pickle protocol can name it)."""
    return _C._treespec_from_state(state)



def treespec_paths(treespec: PyTreeSpec, /) -> list[tuple[Any, ...]]:
    """The path of each leaf of ``treespec``.

    Args:
        treespec: The structure to inspect.

        >>> treespec_paths(tree_structure({'a': [1, 2]}))
        [('a', 0), ('a', 1)]
    """
    return treespec.paths()


def treespec_accessors(treespec: PyTreeSpec, /) -> list[PyTreeAccessor]:
    """The :class:`PyTreeAccessor` of each leaf of ``treespec``.

    Args:
        treespec: The structure to inspect.

        >>> [a.path for a in treespec_accessors(tree_structure([1, {'k': 2}]))]
        [(0,), (1, 'k')]
    """
    return treespec._accessors(ENTRY_CLASSES, PyTreeAccessor, KINDS)


def _child_index(index: Any) -> int:
    """``index`` as an int: anything with ``__index__``, or ``__int__`` but not a float (1.5 is
    no position); else a TypeError."""
    if hasattr(type(index), "__index__"):
        return operator.index(index)
    if hasattr(type(index), "__int__") and not isinstance(index, float):
        return int(index)
    raise TypeError(f"A child index must be an integer, got {type(index).__name__}: {index!r}.")


def treespec_entries(treespec: PyTreeSpec, /) -> list[Any]:
    """The entries (keys, indices) of the root's children.

    Args:
        treespec: The structure to inspect.

        >>> treespec_entries(tree_structure({'b': 1, 'a': 2}))
        ['a', 'b']
    """
    return treespec.entries()


def treespec_entry(treespec: PyTreeSpec, index: int, /) -> Any:
    """The entry of the root's ``index``-th child.

    Args:
        treespec: The structure to inspect.
        index: The position of the child among the root's children (negative counts from the end).

        >>> treespec_entry(tree_structure([1, 2, 3]), -1)
        2
    """
    return treespec.entry(_child_index(index))


def treespec_children(treespec: PyTreeSpec, /) -> list[PyTreeSpec]:
    """The specs of the root's children.

    Args:
        treespec: The structure to inspect.

        >>> treespec_children(tree_structure({'a': 1, 'b': [2]}))
        [PyTreeSpec(*), PyTreeSpec([*])]
    """
    return treespec.children()


def treespec_child(treespec: PyTreeSpec, index: int, /) -> PyTreeSpec:
    """The spec of the root's ``index``-th child.

    Args:
        treespec: The structure to inspect.
        index: The position of the child among the root's children (negative counts from the end).

        >>> treespec_child(tree_structure([1, (2, 3)]), 1)
        PyTreeSpec((*, *))
    """
    return treespec.child(_child_index(index))


def treespec_one_level(treespec: PyTreeSpec, /) -> PyTreeSpec | None:
    """The root node alone, its children replaced by leaves (``None`` for a leaf).

    Args:
        treespec: The structure to inspect.

        >>> treespec_one_level(tree_structure({'a': [1, 2], 'b': 3}))
        PyTreeSpec({'a': *, 'b': *})
    """
    return treespec.one_level()


def treespec_transform(
    treespec: PyTreeSpec,
    /,
    f_node: Callable[[PyTreeSpec], PyTreeSpec] | None = None,
    f_leaf: Callable[[PyTreeSpec], PyTreeSpec] | None = None,
) -> PyTreeSpec:
    """Rebuild ``treespec`` bottom-up: each leaf spec goes through ``f_leaf`` and each inner
    node's one-level spec through ``f_node`` (which must keep the number of children).

    Args:
        treespec: The structure to rebuild.
        f_node: Optional; called on each inner node's one-level spec, returns its replacement (same
            number of children).
        f_leaf: Optional; called on each leaf spec, returns the spec put in its place.

        >>> pair = tree_structure((0, 0))
        >>> treespec_transform(tree_structure([1, 2]), f_leaf=lambda _: pair)
        PyTreeSpec([(*, *), (*, *)])
    """
    return _transform(treespec, f_node, f_leaf)


def _transform(spec: PyTreeSpec, f_node: Any, f_leaf: Any) -> PyTreeSpec:
    if spec.is_leaf():
        return spec if f_leaf is None else _checked_replacement(spec, f_leaf(spec), "f_leaf")
    children = [_transform(c, f_node, f_leaf) for c in spec.children()]
    node = spec
    if f_node is not None:
        node = _checked_replacement(spec, f_node(spec.one_level()), "f_node")
        if not all(child.is_leaf() for child in node.children()):
            raise ValueError(f"f_node must return a one-level PyTreeSpec (a node over leaves), "
                             f"got {node}.")
        if node.num_children != len(children):
            raise ValueError(f"f_node must return a PyTreeSpec with {len(children)} children "
                             f"(the node's), got {node}.")
    return node._replace_children(children)


def _checked_replacement(spec: PyTreeSpec, replacement: Any, name: str) -> PyTreeSpec:
    """What ``f_node``/``f_leaf`` returned, if it can stand in ``spec``'s place."""
    if not isinstance(replacement, PyTreeSpec):
        raise TypeError(f"{name} must return a PyTreeSpec, got {replacement!r}.")
    if replacement.none_is_leaf != spec.none_is_leaf:
        raise ValueError(f"{name} must return a PyTreeSpec with none_is_leaf="
                         f"{spec.none_is_leaf} (the input's), got {replacement}.")
    return replacement


def treespec_is_leaf(treespec: PyTreeSpec, /, strict: bool = True) -> bool:
    """Whether ``treespec`` is a single leaf (``strict=False``: or ``None``).

    Args:
        treespec: The structure to inspect.
        strict: Whether only a true leaf counts (``False``: ``None`` does too).

        >>> treespec_is_leaf(tree_structure(1)), treespec_is_leaf(tree_structure(None), strict=False)
        (True, True)
    """
    return treespec.is_leaf(strict=strict)


def treespec_is_strict_leaf(treespec: PyTreeSpec, /) -> bool:
    """Whether ``treespec`` is exactly one leaf.

    Args:
        treespec: The structure to inspect.

        >>> treespec_is_strict_leaf(tree_structure(1)), treespec_is_strict_leaf(tree_structure(None))
        (True, False)
    """
    return treespec.is_leaf(strict=True)


def treespec_is_one_level(treespec: PyTreeSpec, /) -> bool:
    """Whether ``treespec`` is one node whose children are all leaves.

    Args:
        treespec: The structure to inspect.

        >>> treespec_is_one_level(tree_structure([1, 2])), treespec_is_one_level(tree_structure([1, [2]]))
        (True, False)
    """
    return treespec.is_one_level()


def treespec_is_prefix(treespec: PyTreeSpec, other: PyTreeSpec, /, strict: bool = False) -> bool:
    """Whether ``treespec`` is a prefix of ``other``.

    Args:
        treespec: The candidate prefix.
        other: The structure to compare with.
        strict: Whether equal structures are excluded.

        >>> treespec_is_prefix(tree_structure([0, 0]), tree_structure([(1, 2), 3]))
        True
    """
    return treespec.is_prefix(other, strict=strict)


def treespec_is_suffix(treespec: PyTreeSpec, other: PyTreeSpec, /, strict: bool = False) -> bool:
    """Whether ``treespec`` is a suffix of ``other`` (``other`` is a prefix of it).

    Args:
        treespec: The candidate suffix.
        other: The structure to compare with.
        strict: Whether equal structures are excluded.

        >>> treespec_is_suffix(tree_structure([(1, 2), 3]), tree_structure([0, 0]))
        True
    """
    return treespec.is_suffix(other, strict=strict)


def treespec_leaf(*, none_is_leaf: bool = False, namespace: str = "") -> PyTreeSpec:
    """The spec of a single leaf.

    Args:
        none_is_leaf: Whether the spec treats ``None`` as a leaf.
        namespace: The registry namespace the spec records.

        >>> treespec_leaf()
        PyTreeSpec(*)
    """
    return _C.make_leaf(none_is_leaf)


def treespec_none(*, none_is_leaf: bool = False, namespace: str = "") -> PyTreeSpec:
    """The spec of ``None``.

    Args:
        none_is_leaf: Whether the spec treats ``None`` as a leaf (then this is a leaf spec).
        namespace: The registry namespace the spec records.

        >>> treespec_none(), treespec_none(none_is_leaf=True)
        (PyTreeSpec(None), PyTreeSpec(*, NoneIsLeaf))
    """
    return _C.make_none(none_is_leaf)


def treespec_from_collection(collection: Any, /, *, none_is_leaf: bool = False,
                             namespace: str = "") -> PyTreeSpec:
    """The spec of a container whose children are specs.

    Args:
        collection: A container (tuple, list, dict, namedtuple, registered node...) whose children
            are PyTreeSpecs.
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.

        >>> treespec_from_collection({'a': treespec_leaf(), 'b': [treespec_leaf()]})
        Traceback (most recent call last):
            ...
        ValueError: Expected a collection of PyTreeSpecs, got a child [PyTreeSpec(*)] in {'a': PyTreeSpec(*), 'b': [PyTreeSpec(*)]}.
        >>> treespec_from_collection({'a': treespec_leaf(), 'b': treespec_none()})
        PyTreeSpec({'a': *, 'b': None})
    """
    if collection is None and not none_is_leaf:
        return _C.make_none(none_is_leaf)
    return _C.make_from_collection(collection, none_is_leaf, namespace)


def treespec_tuple(iterable: Iterable[PyTreeSpec] = (), /, *, none_is_leaf: bool = False,
                   namespace: str = "") -> PyTreeSpec:
    """The spec of a tuple of the given specs.

    Args:
        iterable: The children, PyTreeSpecs in order.
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.

        >>> treespec_tuple([treespec_leaf(), treespec_leaf()])
        PyTreeSpec((*, *))
    """
    return _C.make_from_collection(tuple(iterable), none_is_leaf, namespace)


def treespec_list(iterable: Iterable[PyTreeSpec] = (), /, *, none_is_leaf: bool = False,
                  namespace: str = "") -> PyTreeSpec:
    """The spec of a list of the given specs.

    Args:
        iterable: The children, PyTreeSpecs in order.
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.

        >>> treespec_list([treespec_leaf(), treespec_none()])
        PyTreeSpec([*, None])
    """
    return _C.make_from_collection(list(iterable), none_is_leaf, namespace)


def treespec_dict(mapping: Any = (), /, *, none_is_leaf: bool = False, namespace: str = "",
                  **kwargs: PyTreeSpec) -> PyTreeSpec:
    """The spec of a dict of the given specs.

    Args:
        mapping: The children: a mapping (or iterable of key/spec pairs) from keys to PyTreeSpecs.
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.

        >>> treespec_dict(b=treespec_leaf(), a=treespec_none())
        PyTreeSpec({'a': None, 'b': *})
    """
    return _C.make_from_collection(dict(mapping, **kwargs), none_is_leaf, namespace)


def treespec_frozendict(mapping: Any = (), /, *, none_is_leaf: bool = False, namespace: str = "",
                        **kwargs: PyTreeSpec) -> PyTreeSpec:
    """The spec of a ``frozendict`` (PEP 814, Python 3.15+) of the given specs; not supported yet.

    Present so that code written against ``optree`` imports; it always raises, since
    optree-core has no frozendict node kind (and older Pythons have no ``frozendict``).

    Args:
        mapping: The children: a mapping (or iterable of key/spec pairs) from keys to PyTreeSpecs.
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.
        **kwargs: More children, by key.

    Raises:
        RuntimeError: always.

        >>> treespec_frozendict(a=treespec_leaf())
        Traceback (most recent call last):
          ...
        RuntimeError: treespec_frozendict: ...
    """
    import builtins

    if not hasattr(builtins, "frozendict"):
        raise RuntimeError("treespec_frozendict: needs Python 3.15+ with the built-in frozendict (PEP 814)")
    raise RuntimeError("treespec_frozendict: optree-core has no frozendict node kind yet; use treespec_dict")


def treespec_namedtuple(namedtuple: Any, /, *, none_is_leaf: bool = False,
                        namespace: str = "") -> PyTreeSpec:
    """The spec of a namedtuple whose fields are specs.

    Args:
        namedtuple: A namedtuple instance whose fields are PyTreeSpecs.
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.

        >>> from collections import namedtuple
        >>> Point = namedtuple('Point', 'x y')
        >>> treespec_namedtuple(Point(treespec_leaf(), treespec_leaf()))
        PyTreeSpec(Point(x=*, y=*))
    """
    from optree_core.typing import is_namedtuple_instance

    if not is_namedtuple_instance(namedtuple):
        raise ValueError(f"Expected a namedtuple of PyTreeSpec(s), got {namedtuple!r}.")
    return _C.make_from_collection(namedtuple, none_is_leaf, namespace)


def treespec_ordereddict(mapping: Any = (), /, *, none_is_leaf: bool = False,
                         namespace: str = "", **kwargs: PyTreeSpec) -> PyTreeSpec:
    """The spec of an OrderedDict of the given specs.

    Args:
        mapping: The children: a mapping (or iterable of key/spec pairs) from keys to PyTreeSpecs.
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.

        >>> treespec_ordereddict([('b', treespec_leaf()), ('a', treespec_leaf())])
        PyTreeSpec(OrderedDict({'b': *, 'a': *}))
    """
    return _C.make_from_collection(OrderedDict(mapping, **kwargs), none_is_leaf, namespace)


def treespec_defaultdict(default_factory: Any = None, mapping: Any = (), /, *,
                         none_is_leaf: bool = False, namespace: str = "",
                         **kwargs: PyTreeSpec) -> PyTreeSpec:
    """The spec of a defaultdict of the given specs.

    Args:
        default_factory: The defaultdict's ``default_factory``.
        mapping: The children: a mapping (or iterable of key/spec pairs) from keys to PyTreeSpecs.
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.

        >>> treespec_defaultdict(list, {'a': treespec_leaf()})
        PyTreeSpec(defaultdict(<class 'list'>, {'a': *}))
    """
    return _C.make_from_collection(defaultdict(default_factory, mapping, **kwargs), none_is_leaf,
                                   namespace)


def treespec_deque(iterable: Iterable[PyTreeSpec] = (), /, maxlen: int | None = None, *,
                   none_is_leaf: bool = False, namespace: str = "") -> PyTreeSpec:
    """The spec of a deque of the given specs.

    Args:
        iterable: The children, PyTreeSpecs in order.
        maxlen: The deque's ``maxlen`` (``None``: unbounded).
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.

        >>> treespec_deque([treespec_leaf(), treespec_none()], maxlen=3)
        PyTreeSpec(deque([*, None], maxlen=3))
    """
    return _C.make_from_collection(deque(iterable, maxlen=maxlen), none_is_leaf, namespace)


def treespec_structseq(structseq: Any, /, *, none_is_leaf: bool = False,
                       namespace: str = "") -> PyTreeSpec:
    """The spec of a PyStructSequence whose fields are specs.

    Args:
        structseq: A PyStructSequence instance whose fields are PyTreeSpecs.
        none_is_leaf: Whether the spec treats ``None`` as a leaf; every child must agree.
        namespace: The registry namespace the spec records; children must use it or none.

        >>> import time
        >>> spec = treespec_structseq(time.struct_time([treespec_leaf()] * 9))
        >>> spec.num_leaves, spec.type
        (9, <class 'time.struct_time'>)
    """
    from optree_core.typing import is_structseq_instance

    if not is_structseq_instance(structseq):
        raise ValueError(f"Expected a PyStructSequence of PyTreeSpec(s), got {structseq!r}.")
    return _C.make_from_collection(structseq, none_is_leaf, namespace)
