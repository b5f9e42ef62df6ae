"""A small, slow, obviously-correct pure-Python pytree, the oracle of the property-based tests.

It knows the built-in node kinds (tuple, list, dict, None, namedtuple, PyStructSequence,
OrderedDict, defaultdict, deque) plus the custom nodes the tests register, and implements
flatten, flatten-with-path, unflatten, node counting and the ``PyTreeSpec`` repr exactly as the
optree documentation describes them. It never calls ``optree_core``.

A reference spec is a small immutable tree of ``RefNode`` tuples: ``kind`` is one of the strings
below, ``meta`` is what unflatten needs (dict keys in insertion order, the namedtuple class, the
deque's maxlen, ...), and ``children`` are ``RefNode`` s in flatten order.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

LEAF = "leaf"
NONE = "none"
TUPLE = "tuple"
LIST = "list"
DICT = "dict"
NAMEDTUPLE = "namedtuple"
ORDEREDDICT = "ordereddict"
DEFAULTDICT = "defaultdict"
DEQUE = "deque"
STRUCTSEQ = "structseq"
CUSTOM = "custom"


class RefNode(NamedTuple):
    kind: str
    meta: Any = None
    children: tuple[RefNode, ...] = ()
    entries: tuple[Any, ...] = ()
    node_type: type | None = None


# Custom node types the reference understands: type -> (flatten, unflatten, repr name).
# flatten(obj) -> (children, metadata, entries); unflatten(metadata, children) -> obj.
CUSTOM_NODES: dict[type, tuple[Callable, Callable]] = {}


def register_reference_node(cls: type, flatten: Callable, unflatten: Callable) -> None:
    CUSTOM_NODES[cls] = (flatten, unflatten)


def is_namedtuple_instance(obj: Any) -> bool:
    cls = type(obj)
    return (
        issubclass(cls, tuple)
        and isinstance(getattr(cls, "_fields", None), tuple)
        and all(isinstance(f, str) for f in cls._fields)
        and callable(getattr(cls, "_make", None))
        and callable(getattr(cls, "_asdict", None))
    )


def is_structseq_instance(obj: Any) -> bool:
    cls = type(obj)
    return (
        issubclass(cls, tuple)
        and cls.__bases__ == (tuple,)
        and isinstance(getattr(cls, "n_sequence_fields", None), int)
        and isinstance(getattr(cls, "n_fields", None), int)
        and isinstance(getattr(cls, "n_unnamed_fields", None), int)
    )


def sorted_keys(keys: list[Any]) -> list[Any]:
    """optree's total order: plain sort, then sort by (type name, key), else insertion order."""
    try:
        return sorted(keys)
    except TypeError:
        pass
    try:
        return sorted(keys, key=lambda k: (f"{type(k).__module__}.{type(k).__qualname__}", k))
    except TypeError:
        return list(keys)


def _node_of(
    obj: Any, none_is_leaf: bool, insertion_ordered: bool = False
) -> tuple[str, Any, list[Any], tuple[Any, ...]]:
    """(kind, meta, children in flatten order, entries) of one node, or kind LEAF."""
    order = list if insertion_ordered else sorted_keys
    cls = type(obj)
    if obj is None:
        return (LEAF, None, [], ()) if none_is_leaf else (NONE, None, [], ())
    if cls in CUSTOM_NODES:
        children, meta, entries = CUSTOM_NODES[cls][0](obj)
        children = list(children)
        entries = tuple(entries) if entries is not None else tuple(range(len(children)))
        return CUSTOM, meta, children, entries
    if cls is tuple:
        return TUPLE, None, list(obj), tuple(range(len(obj)))
    if cls is list:
        return LIST, None, list(obj), tuple(range(len(obj)))
    if cls is dict:
        keys = order(list(obj))
        return DICT, tuple(obj), [obj[k] for k in keys], tuple(keys)
    if cls is collections.OrderedDict:
        keys = list(obj)
        return ORDEREDDICT, tuple(keys), [obj[k] for k in keys], tuple(keys)
    if cls is collections.defaultdict:
        keys = order(list(obj))
        return DEFAULTDICT, (obj.default_factory, tuple(obj)), [obj[k] for k in keys], tuple(keys)
    if cls is collections.deque:
        return DEQUE, obj.maxlen, list(obj), tuple(range(len(obj)))
    if is_namedtuple_instance(obj):
        return NAMEDTUPLE, cls, list(obj), tuple(range(len(obj)))
    if is_structseq_instance(obj):
        return STRUCTSEQ, cls, list(obj), tuple(range(len(obj)))
    return LEAF, None, [], ()


def flatten_with_path(
    tree: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    none_is_leaf: bool = False,
    dict_insertion_ordered: bool = False,
) -> tuple[list[tuple[Any, ...]], list[Any], RefNode]:
    """Depth-first, children in flatten order; returns (paths, leaves, spec).

    With dict_insertion_ordered, dict and defaultdict children keep insertion order (as under
    ``optree_core.dict_insertion_ordered(True, namespace=...)``) instead of sorted key order.
    """
    paths: list[tuple[Any, ...]] = []
    leaves: list[Any] = []

    def visit(obj: Any, path: tuple[Any, ...]) -> RefNode:
        if is_leaf is not None and is_leaf(obj):
            paths.append(path)
            leaves.append(obj)
            return RefNode(LEAF)
        kind, meta, children, entries = _node_of(obj, none_is_leaf, dict_insertion_ordered)
        if kind == LEAF:
            paths.append(path)
            leaves.append(obj)
            return RefNode(LEAF)
        nodes = tuple(visit(c, (*path, e)) for c, e in zip(children, entries))
        return RefNode(kind, meta, nodes, entries, type(obj))

    spec = visit(tree, ())
    return paths, leaves, spec


def flatten(tree: Any, is_leaf=None, none_is_leaf: bool = False) -> tuple[list[Any], RefNode]:
    _, leaves, spec = flatten_with_path(tree, is_leaf, none_is_leaf)
    return leaves, spec


def unflatten(spec: RefNode, leaves: list[Any]) -> Any:
    it: Iterator[Any] = iter(leaves)

    def build(node: RefNode) -> Any:
        if node.kind == LEAF:
            return next(it)
        if node.kind == NONE:
            return None
        children = [build(c) for c in node.children]
        if node.kind == TUPLE:
            return tuple(children)
        if node.kind == LIST:
            return children
        if node.kind in (DICT, ORDEREDDICT):
            by_key = dict(zip(node.entries, children))
            cls = dict if node.kind == DICT else collections.OrderedDict
            return cls((k, by_key[k]) for k in node.meta)
        if node.kind == DEFAULTDICT:
            factory, order = node.meta
            by_key = dict(zip(node.entries, children))
            return collections.defaultdict(factory, ((k, by_key[k]) for k in order))
        if node.kind == DEQUE:
            return collections.deque(children, maxlen=node.meta)
        if node.kind == NAMEDTUPLE:
            return node.meta(*children)
        if node.kind == STRUCTSEQ:
            return node.meta(children)
        if node.kind == CUSTOM:
            return CUSTOM_NODES[node.node_type][1](node.meta, children)
        raise AssertionError(node.kind)

    result = build(spec)
    rest = list(it)
    assert not rest, f"{len(rest)} leaves left over"
    return result


def num_leaves(spec: RefNode) -> int:
    return 1 if spec.kind == LEAF else sum(num_leaves(c) for c in spec.children)


def num_nodes(spec: RefNode) -> int:
    return 1 + sum(num_nodes(c) for c in spec.children)


def spec_repr(spec: RefNode, none_is_leaf: bool = False, namespace: str = "") -> str:
    """The ``repr`` optree gives a ``PyTreeSpec`` for the built-in node kinds."""

    def r(node: RefNode) -> str:
        kids = [r(c) for c in node.children]
        if node.kind == LEAF:
            return "*"
        if node.kind == NONE:
            return "None"
        if node.kind == TUPLE:
            return f"({kids[0]},)" if len(kids) == 1 else f"({', '.join(kids)})"
        if node.kind == LIST:
            return f"[{', '.join(kids)}]"
        if node.kind in (DICT, ORDEREDDICT, DEFAULTDICT):
            body = "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(node.entries, kids)) + "}"
            if node.kind == DICT:
                return body
            if node.kind == ORDEREDDICT:
                return f"OrderedDict({body if kids else ''})"
            return f"defaultdict({node.meta[0]!r}, {body})"
        if node.kind == DEQUE:
            args = [f"[{', '.join(kids)}]"] if kids else []
            if node.meta is not None:
                args.append(f"maxlen={node.meta}")
            return f"deque({', '.join(args)})"
        if node.kind == NAMEDTUPLE:
            fields = ", ".join(f"{f}={k}" for f, k in zip(node.meta._fields, kids))
            return f"{node.meta.__name__}({fields})"
        if node.kind == STRUCTSEQ:
            cls = node.meta
            fields = ", ".join(f"{f}={k}" for f, k in zip(structseq_field_names(cls), kids))
            return f"{cls.__module__}.{cls.__qualname__}({fields})"
        raise AssertionError(f"no reference repr for {node.kind}")

    suffix = ", NoneIsLeaf" if none_is_leaf else ""
    if namespace:
        suffix += f", namespace={namespace!r}"
    return f"PyTreeSpec({r(spec)}{suffix})"


def structseq_field_names(cls: type) -> tuple[str, ...]:
    # A PyStructSequence's __match_args__ lists its visible named fields in order.
    return tuple(cls.__match_args__)


def same_tree(a: Any, b: Any) -> bool:
    """Deep equality that also checks node types, dict key order, default_factory and maxlen."""
    if type(a) is not type(b):
        return False
    if isinstance(a, collections.defaultdict) and a.default_factory is not b.default_factory:
        return False
    if isinstance(a, collections.deque) and a.maxlen != b.maxlen:
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_tree(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple, collections.deque)):
        return len(a) == len(b) and all(same_tree(x, y) for x, y in zip(a, b))
    if type(a) in CUSTOM_NODES:
        ca, ma, _ = CUSTOM_NODES[type(a)][0](a)
        cb, mb, _ = CUSTOM_NODES[type(b)][0](b)
        return ma == mb and same_tree(list(ca), list(cb))
    return a is b or a == b
